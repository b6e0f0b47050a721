//! One result row per engine, setup and step; how rows travel from a child to the parent;
//! results.json and results.csv.

use serde::Serialize;

/// What one engine/setup did in one step. The first fields, serialized, are exactly the
/// `rows` objects of results.json; the rest (skipped) go to its `details` objects.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Row {
    /// `larch`, `lmdb`, `redb`, `sqlite`, `fjall`, or `limit`.
    pub engine: String,
    /// larch's policy/write mode, a limit's name, or `default`.
    pub setup: String,
    /// Step name.
    pub step: String,
    /// Operations per second (NaN when the step failed).
    pub ops: f64,
    /// Median latency per operation (load: per commit), microseconds.
    pub p50_us: f64,
    /// 99th percentile, microseconds.
    pub p99_us: f64,
    /// 99.9th percentile, microseconds.
    pub p999_us: f64,
    /// Database bytes allocated on disk after the step (du).
    pub db_bytes: u64,
    /// Database bytes, apparent (file lengths).
    pub db_apparent_bytes: u64,
    /// read_bytes of /proc/self/io per operation, in 4 KiB units.
    pub reads_per_op: f64,
    /// KiB written per operation (device sectors, or /proc/self/io write_bytes: see `wkb_source`).
    pub wkb_per_op: f64,
    /// Context switches per operation.
    pub cs_per_op: f64,
    /// User + system CPU microseconds per operation.
    pub cpu_us_per_op: f64,
    /// Peak resident memory during the step.
    pub rss_bytes: u64,
    /// db_bytes / (docs x (key + value)).
    pub space_amp: f64,
    // ---- details: not in `rows`, written by the `Details` of results_json ----
    /// Operations counted.
    #[serde(skip)]
    pub ops_total: u64,
    /// Seconds the operations took.
    #[serde(skip)]
    pub secs: f64,
    /// Threads of the main activity.
    #[serde(skip)]
    pub threads: usize,
    /// Major faults per operation.
    #[serde(skip)]
    pub major_faults_per_op: f64,
    /// read_bytes of /proc/self/io over the step.
    #[serde(skip)]
    pub proc_read_bytes: Option<u64>,
    /// write_bytes of /proc/self/io over the step.
    #[serde(skip)]
    pub proc_write_bytes: Option<u64>,
    /// Bytes written to the device over the step (whole machine).
    #[serde(skip)]
    pub device_write_bytes: Option<u64>,
    /// `device:NAME` or `proc:write_bytes`.
    #[serde(skip)]
    pub wkb_source: String,
    /// Writes/s of the limited writer (pqw, rqw; rows/s of the writer of ib.qr100/ib.qp100).
    #[serde(skip)]
    pub writer_ops: Option<f64>,
    /// ib.l.i1: rows/s of each tenth of the step's rows (the curve as the cache fills).
    #[serde(skip)]
    pub tenths: Option<Vec<f64>>,
    /// Why the step has no numbers.
    #[serde(skip)]
    pub error: Option<String>,
    /// The reader processes the step's readers ran as (`--readers`: `pq.n`, `rq.n`);
    /// 0 when they were threads of the engine's process (and for every other step).
    #[serde(skip)]
    pub reader_processes: usize,
}

/// What [`Row::step_label`] adds to a step whose readers were processes.
pub const PROCS_SUFFIX: &str = "/procs";

/// Field names of the `rows` objects, in order.
pub const ROW_FIELDS: [&str; 15] = [
    "engine",
    "setup",
    "step",
    "ops",
    "p50_us",
    "p99_us",
    "p999_us",
    "db_bytes",
    "db_apparent_bytes",
    "reads_per_op",
    "wkb_per_op",
    "cs_per_op",
    "cpu_us_per_op",
    "rss_bytes",
    "space_amp",
];

/// Field names of the `details` objects (after engine, setup, step).
pub const DETAIL_FIELDS: [&str; 12] = [
    "ops_total",
    "secs",
    "threads",
    "major_faults_per_op",
    "proc_read_bytes",
    "proc_write_bytes",
    "device_write_bytes",
    "wkb_source",
    "writer_ops",
    "tenths",
    "error",
    "reader_processes",
];

fn escape(s: &str) -> String {
    s.replace('%', "%25")
        .replace('\t', "%09")
        .replace('\n', "%0A")
        .replace('=', "%3D")
}

fn unescape(s: &str) -> String {
    s.replace("%3D", "=")
        .replace("%0A", "\n")
        .replace("%09", "\t")
        .replace("%25", "%")
}

fn opt<T: ToString>(o: &Option<T>) -> String {
    o.as_ref().map_or(String::new(), ToString::to_string)
}

impl Row {
    /// A row with no numbers, for a step that failed or never ran.
    pub fn failed(engine: &str, setup: &str, step: &str, error: String) -> Row {
        Row {
            engine: engine.into(),
            setup: setup.into(),
            step: step.into(),
            ops: f64::NAN,
            p50_us: f64::NAN,
            p99_us: f64::NAN,
            p999_us: f64::NAN,
            reads_per_op: f64::NAN,
            wkb_per_op: f64::NAN,
            cs_per_op: f64::NAN,
            cpu_us_per_op: f64::NAN,
            space_amp: f64::NAN,
            major_faults_per_op: f64::NAN,
            error: Some(error),
            ..Row::default()
        }
    }

    /// The step's name in the tables and the chart: the step, `/procs` after it when its
    /// readers were processes (`pq.n/procs`), so a run shows which mode each row ran in.
    pub fn step_label(&self) -> String {
        if self.reader_processes > 0 {
            format!("{}{PROCS_SUFFIX}", self.step)
        } else {
            self.step.clone()
        }
    }

    /// engine, or `engine setup` when the setup is not `default`: the column name.
    pub fn label(&self) -> String {
        label(&self.engine, &self.setup)
    }

    /// Every field as (name, text), rows fields first: the CSV columns and the line format.
    pub fn fields(&self) -> Vec<(&'static str, String)> {
        vec![
            ("engine", self.engine.clone()),
            ("setup", self.setup.clone()),
            ("step", self.step.clone()),
            ("ops", self.ops.to_string()),
            ("p50_us", self.p50_us.to_string()),
            ("p99_us", self.p99_us.to_string()),
            ("p999_us", self.p999_us.to_string()),
            ("db_bytes", self.db_bytes.to_string()),
            ("db_apparent_bytes", self.db_apparent_bytes.to_string()),
            ("reads_per_op", self.reads_per_op.to_string()),
            ("wkb_per_op", self.wkb_per_op.to_string()),
            ("cs_per_op", self.cs_per_op.to_string()),
            ("cpu_us_per_op", self.cpu_us_per_op.to_string()),
            ("rss_bytes", self.rss_bytes.to_string()),
            ("space_amp", self.space_amp.to_string()),
            ("ops_total", self.ops_total.to_string()),
            ("secs", self.secs.to_string()),
            ("threads", self.threads.to_string()),
            ("major_faults_per_op", self.major_faults_per_op.to_string()),
            ("proc_read_bytes", opt(&self.proc_read_bytes)),
            ("proc_write_bytes", opt(&self.proc_write_bytes)),
            ("device_write_bytes", opt(&self.device_write_bytes)),
            ("wkb_source", self.wkb_source.clone()),
            ("writer_ops", opt(&self.writer_ops)),
            (
                "tenths",
                self.tenths.as_ref().map_or(String::new(), |t| {
                    t.iter().map(f64::to_string).collect::<Vec<_>>().join(";")
                }),
            ),
            ("error", opt(&self.error)),
            ("reader_processes", self.reader_processes.to_string()),
        ]
    }

    /// One line, `name=value` pairs separated by tabs: what a child writes for its parent.
    pub fn to_line(&self) -> String {
        let parts: Vec<String> = self
            .fields()
            .into_iter()
            .map(|(k, v)| format!("{k}={}", escape(&v)))
            .collect();
        parts.join("\t")
    }

    /// Inverse of [`Row::to_line`].
    pub fn from_line(line: &str) -> Result<Row, String> {
        let mut r = Row::default();
        let f = |v: &str| -> Result<f64, String> {
            v.parse::<f64>().map_err(|_| format!("bad number {v:?}"))
        };
        let u = |v: &str| -> Result<u64, String> {
            v.parse::<u64>().map_err(|_| format!("bad integer {v:?}"))
        };
        let ou = |v: &str| -> Result<Option<u64>, String> {
            if v.is_empty() {
                Ok(None)
            } else {
                u(v).map(Some)
            }
        };
        let mut seen = 0;
        for part in line.trim_end_matches('\n').split('\t') {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| format!("{part:?} is not name=value"))?;
            let v = unescape(v);
            let v = v.as_str();
            match k {
                "engine" => r.engine = v.into(),
                "setup" => r.setup = v.into(),
                "step" => r.step = v.into(),
                "ops" => r.ops = f(v)?,
                "p50_us" => r.p50_us = f(v)?,
                "p99_us" => r.p99_us = f(v)?,
                "p999_us" => r.p999_us = f(v)?,
                "db_bytes" => r.db_bytes = u(v)?,
                "db_apparent_bytes" => r.db_apparent_bytes = u(v)?,
                "reads_per_op" => r.reads_per_op = f(v)?,
                "wkb_per_op" => r.wkb_per_op = f(v)?,
                "cs_per_op" => r.cs_per_op = f(v)?,
                "cpu_us_per_op" => r.cpu_us_per_op = f(v)?,
                "rss_bytes" => r.rss_bytes = u(v)?,
                "space_amp" => r.space_amp = f(v)?,
                "ops_total" => r.ops_total = u(v)?,
                "secs" => r.secs = f(v)?,
                "threads" => r.threads = u(v)? as usize,
                "major_faults_per_op" => r.major_faults_per_op = f(v)?,
                "proc_read_bytes" => r.proc_read_bytes = ou(v)?,
                "proc_write_bytes" => r.proc_write_bytes = ou(v)?,
                "device_write_bytes" => r.device_write_bytes = ou(v)?,
                "wkb_source" => r.wkb_source = v.into(),
                "writer_ops" => r.writer_ops = if v.is_empty() { None } else { Some(f(v)?) },
                "tenths" => {
                    r.tenths = if v.is_empty() {
                        None
                    } else {
                        Some(v.split(';').map(f).collect::<Result<_, _>>()?)
                    }
                }
                "error" => r.error = (!v.is_empty()).then(|| v.to_string()),
                "reader_processes" => r.reader_processes = u(v)? as usize,
                _ => continue,
            }
            seen += 1;
        }
        if seen < ROW_FIELDS.len() {
            return Err(format!("row line has {seen} known fields: {line:?}"));
        }
        Ok(r)
    }

    /// The `details` object of results.json.
    pub(crate) fn details(&self) -> Details<'_> {
        Details {
            engine: &self.engine,
            setup: &self.setup,
            step: &self.step,
            ops_total: self.ops_total,
            secs: self.secs,
            threads: self.threads,
            major_faults_per_op: self.major_faults_per_op,
            proc_read_bytes: self.proc_read_bytes,
            proc_write_bytes: self.proc_write_bytes,
            device_write_bytes: self.device_write_bytes,
            wkb_source: &self.wkb_source,
            writer_ops: self.writer_ops,
            tenths: self.tenths.as_deref(),
            error: self.error.as_deref(),
            reader_processes: self.reader_processes,
        }
    }
}

/// A `details` object of results.json: engine, setup, step, then the [`Row`] fields after
/// `space_amp` ([`DETAIL_FIELDS`]), meaning what they mean there.
#[derive(Serialize)]
pub(crate) struct Details<'a> {
    engine: &'a str,
    setup: &'a str,
    step: &'a str,
    ops_total: u64,
    secs: f64,
    threads: usize,
    major_faults_per_op: f64,
    proc_read_bytes: Option<u64>,
    proc_write_bytes: Option<u64>,
    device_write_bytes: Option<u64>,
    wkb_source: &'a str,
    writer_ops: Option<f64>,
    tenths: Option<&'a [f64]>,
    error: Option<&'a str>,
    reader_processes: usize,
}

/// The column name of an engine/setup.
pub fn label(engine: &str, setup: &str) -> String {
    if setup == "default" {
        engine.to_string()
    } else {
        format!("{engine} {setup}")
    }
}

/// results.json: `{"machine", "config", "rows", "details"}`.
pub fn results_json(machine: &impl Serialize, config: &impl Serialize, rows: &[Row]) -> String {
    results_json_with(machine, config, rows, None::<&()>)
}

/// [`results_json`], and `"rounds"` after `details` when given (`--rounds` above 1: every
/// round's rows, [`crate::rounds::rounds_json`]).
pub fn results_json_with(
    machine: &impl Serialize,
    config: &impl Serialize,
    rows: &[Row],
    rounds: Option<&impl Serialize>,
) -> String {
    #[derive(Serialize)]
    struct Results<'a, M, C, R> {
        machine: &'a M,
        config: &'a C,
        rows: &'a [Row],
        details: Vec<Details<'a>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        rounds: Option<&'a R>,
    }
    crate::json::pretty(&Results {
        machine,
        config,
        rows,
        details: rows.iter().map(Row::details).collect(),
        rounds,
    })
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// results.csv: a header, then one line per row; empty cells for missing numbers.
pub fn results_csv(rows: &[Row]) -> String {
    let mut out = csv_header();
    out.push('\n');
    for r in rows {
        out.push_str(&csv_line(r));
        out.push('\n');
    }
    out
}

/// The header line of results.csv (no newline): the names of [`Row::fields`].
pub fn csv_header() -> String {
    let header: Vec<&str> = Row::default().fields().iter().map(|(k, _)| *k).collect();
    header.join(",")
}

/// One row's line of results.csv (no newline); empty cells for missing numbers.
pub fn csv_line(r: &Row) -> String {
    let cells: Vec<String> = r
        .fields()
        .into_iter()
        .map(|(_, v)| {
            if v == "NaN" || v == "inf" {
                String::new()
            } else {
                csv_field(&v)
            }
        })
        .collect();
    cells.join(",")
}

/// The keys of the first row of a results.json, in order (none if the text is not JSON or
/// has no row), checked by the tests and by the smoke test.
pub fn row_keys(text: &str) -> Vec<String> {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(text) else {
        return vec![];
    };
    v["rows"][0]
        .as_object()
        .map_or_else(Vec::new, |row| row.keys().cloned().collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sample() -> Row {
        Row {
            engine: "larch".into(),
            setup: "first-fit/pwrite".into(),
            step: "ows.1".into(),
            ops: 2100.5,
            p50_us: 400.25,
            p99_us: 900.0,
            p999_us: 1500.0,
            db_bytes: 1 << 20,
            db_apparent_bytes: 2 << 20,
            reads_per_op: 0.0,
            wkb_per_op: 12.5,
            cs_per_op: 2.0,
            cpu_us_per_op: 30.0,
            rss_bytes: 50 << 20,
            space_amp: 1.5,
            ops_total: 21005,
            secs: 10.0,
            threads: 1,
            major_faults_per_op: 0.0,
            proc_read_bytes: Some(0),
            proc_write_bytes: Some(123),
            device_write_bytes: None,
            wkb_source: "device:vda".into(),
            writer_ops: None,
            tenths: Some(vec![1000.0, 950.5]),
            error: Some("a\tb=c\nd%".into()),
            reader_processes: 4,
        }
    }

    #[test]
    fn lines_round_trip() {
        let r = sample();
        let line = r.to_line();
        assert!(!line.contains('\n'));
        assert_eq!(Row::from_line(&line).unwrap(), r);
        let f = Row::failed("lmdb", "default", "load", "boom".into());
        let back = Row::from_line(&f.to_line()).unwrap();
        assert!(back.ops.is_nan());
        assert_eq!(back.error.as_deref(), Some("boom"));
        assert!(Row::from_line("engine=x").is_err());
        assert!(Row::from_line("garbage").is_err());
    }

    #[test]
    fn json_has_exactly_the_issue_fields() {
        let text = results_json(&json!({"nproc": 2}), &json!({}), &[sample()]);
        assert_eq!(row_keys(&text), ROW_FIELDS.to_vec());
        assert!(text.contains("\"machine\": {"));
        assert!(text.contains("\"details\": ["));
        assert!(text.contains("\"ops\": 2100.5"));
        let failed = results_json(&(), &(), &[Row::failed("a", "b", "c", "x".into())]);
        assert!(failed.contains("\"ops\": null"));
    }

    #[test]
    fn csv_has_a_header_and_quotes() {
        let mut r = sample();
        r.error = Some("x, \"y\"".into());
        let text = results_csv(&[r, Row::failed("lmdb", "default", "load", "e".into())]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("engine,setup,step,ops,p50_us,p99_us,p999_us,db_bytes"));
        assert!(lines[1].ends_with("\"x, \"\"y\"\"\",4"));
        assert!(lines[2].starts_with("lmdb,default,load,,"));
        assert_eq!(lines[0].split(',').count(), 27);
    }

    #[test]
    fn labels() {
        assert_eq!(label("lmdb", "default"), "lmdb");
        assert_eq!(label("larch", "null/mmap"), "larch null/mmap");
        let mut r = sample();
        assert_eq!(r.step_label(), "ows.1/procs");
        r.reader_processes = 0;
        assert_eq!(r.step_label(), "ows.1");
    }
}
