//! The text tables printed on stdout: ops/s (steps x engines), latency, and one
//! amplification table per step.

use crate::report::Row;

/// A number with three significant digits and a k/M/G suffix: 174k, 2.10k, 1.19M, 0.123.
pub fn sig3(x: f64) -> String {
    if !x.is_finite() {
        return "-".into();
    }
    let (v, suffix) = if x.abs() >= 1e9 {
        (x / 1e9, "G")
    } else if x.abs() >= 1e6 {
        (x / 1e6, "M")
    } else if x.abs() >= 1e3 {
        (x / 1e3, "k")
    } else {
        (x, "")
    };
    let a = v.abs();
    let digits = if a == 0.0 || a >= 99.95 {
        0
    } else if a >= 9.995 {
        1
    } else if a >= 0.9995 || !suffix.is_empty() {
        2
    } else if a >= 0.09995 {
        3
    } else if a >= 0.009995 {
        4
    } else {
        5
    };
    format!("{v:.digits$}{suffix}")
}

/// Bytes in MB (10^6), one decimal.
pub fn mb(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / 1e6)
}

/// Lay out `rows` under `header`: the first column left-aligned, the others right-aligned,
/// two spaces between columns.
pub fn render(header: &[String], rows: &[Vec<String>]) -> String {
    let cols = header.len();
    let mut width = vec![0; cols];
    for r in std::iter::once(header).chain(rows.iter().map(Vec::as_slice)) {
        for (i, c) in r.iter().enumerate().take(cols) {
            width[i] = width[i].max(c.chars().count());
        }
    }
    let mut out = String::new();
    for r in std::iter::once(header).chain(rows.iter().map(Vec::as_slice)) {
        let mut line = String::new();
        for (i, w) in width.iter().enumerate() {
            let c = r.get(i).map(String::as_str).unwrap_or("");
            let pad = w - c.chars().count();
            if i == 0 {
                line.push_str(c);
                line.extend(std::iter::repeat_n(' ', pad));
            } else {
                line.push_str("  ");
                line.extend(std::iter::repeat_n(' ', pad));
                line.push_str(c);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Column labels in first-seen order.
pub fn labels(rows: &[Row]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for r in rows {
        let l = r.label();
        if !out.contains(&l) {
            out.push(l);
        }
    }
    out
}

/// The step labels ([`Row::step_label`]) of `rows`, following `order` (step names): each
/// step, then the same step run with reader processes (`pq.n/procs`) when a row has it.
pub fn step_names(rows: &[Row], order: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    for s in order {
        for procs in [false, true] {
            if let Some(r) = rows
                .iter()
                .find(|r| r.step == *s && (r.reader_processes > 0) == procs)
            {
                out.push(r.step_label());
            }
        }
    }
    out
}

fn find<'r>(rows: &'r [Row], label: &str, step: &str) -> Option<&'r Row> {
    rows.iter()
        .find(|r| r.step_label() == step && r.label() == label)
}

/// ops/s: one row per step, one column per engine/setup.
pub fn ops_table(rows: &[Row], order: &[&str]) -> String {
    let cols = labels(rows);
    let mut header = vec!["ops/s".to_string()];
    header.extend(cols.iter().cloned());
    let body: Vec<Vec<String>> = step_names(rows, order)
        .iter()
        .map(|step| {
            let mut line = vec![step.clone()];
            for c in &cols {
                line.push(find(rows, c, step).map_or(String::new(), |r| {
                    if r.error.is_some() && !r.ops.is_finite() {
                        "failed".into()
                    } else {
                        sig3(r.ops)
                    }
                }));
            }
            line
        })
        .collect();
    render(&header, &body)
}

/// Latency: p50/p99/p99.9 in microseconds, one row per step, one column per engine/setup.
pub fn latency_table(rows: &[Row], order: &[&str]) -> String {
    let cols = labels(rows);
    let mut header = vec!["p50/p99/p99.9 us".to_string()];
    header.extend(cols.iter().cloned());
    let body: Vec<Vec<String>> = step_names(rows, order)
        .iter()
        .map(|step| {
            let mut line = vec![step.clone()];
            for c in &cols {
                line.push(find(rows, c, step).map_or(String::new(), |r| {
                    if r.ops.is_finite() {
                        format!("{}/{}/{}", sig3(r.p50_us), sig3(r.p99_us), sig3(r.p999_us))
                    } else {
                        String::new()
                    }
                }));
            }
            line
        })
        .collect();
    render(&header, &body)
}

/// The amplification table of one step label ([`step_names`]): one row per engine/setup.
pub fn amp_table(rows: &[Row], step: &str) -> String {
    let header: Vec<String> = [
        step, "ops", "db.mb", "r/o", "mf/o", "wKB/o", "cs/o", "cpu/o", "rss", "s-amp", "setup",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let body: Vec<Vec<String>> = rows
        .iter()
        .filter(|r| r.step_label() == step)
        .map(|r| {
            if !r.ops.is_finite() {
                let mut v = vec![r.engine.clone(), "failed".into()];
                v.resize(10, String::new());
                v.push(r.setup.clone());
                return v;
            }
            vec![
                r.engine.clone(),
                sig3(r.ops),
                format!("{}/{}", mb(r.db_bytes), mb(r.db_apparent_bytes)),
                sig3(r.reads_per_op),
                sig3(r.major_faults_per_op),
                sig3(r.wkb_per_op),
                sig3(r.cs_per_op),
                sig3(r.cpu_us_per_op),
                format!("{}M", mb(r.rss_bytes)),
                if r.space_amp > 0.0 {
                    format!("{:.2}", r.space_amp)
                } else {
                    "-".into()
                },
                r.setup.clone(),
            ]
        })
        .collect();
    render(&header, &body)
}

/// The insert rate of each tenth of every `ib.l.i1*` step: one row per engine/setup and step,
/// rows/s per tenth (empty when there is none).
pub fn tenths_table(rows: &[Row]) -> String {
    let mut header = vec!["ib.l.i1 rows/s per tenth".to_string(), "step".to_string()];
    header.extend((1..=10).map(|k| format!("{k}/10")));
    let body: Vec<Vec<String>> = rows
        .iter()
        .filter_map(|r| r.tenths.as_ref().map(|t| (r, t)))
        .map(|(r, t)| {
            let mut line = vec![r.label(), r.step.clone()];
            line.extend(t.iter().map(|x| sig3(*x)));
            line
        })
        .collect();
    if body.is_empty() {
        return String::new();
    }
    render(&header, &body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reader_processes_rows_are_labelled() {
        // larch's pq.n ran 4 reader processes, the BTreeMap limit's pq.n 4 threads: two rows.
        let mut larch = Row::failed("larch", "first-fit/pwrite", "pq.n", String::new());
        larch.error = None;
        larch.ops = 2_000_000.0;
        larch.reader_processes = 4;
        let mut limit = larch.clone();
        limit.engine = "limit".into();
        limit.setup = "btreemap".into();
        limit.ops = 5_000_000.0;
        limit.reader_processes = 0;
        let rows = vec![larch, limit];
        assert_eq!(
            step_names(&rows, &["pq.1", "pq.n"]),
            vec!["pq.n", "pq.n/procs"]
        );
        let ops = ops_table(&rows, &["pq.n"]);
        let lines: Vec<&str> = ops.lines().collect();
        assert_eq!(lines.len(), 3, "{ops}");
        assert!(
            lines[1].starts_with("pq.n ") && lines[1].ends_with("5.00M"),
            "{ops}"
        );
        assert!(
            lines[2].starts_with("pq.n/procs") && lines[2].contains("2.00M"),
            "{ops}"
        );
        assert!(!lines[2].contains("5.00M"), "{ops}");
        let amp = amp_table(&rows, "pq.n/procs");
        assert_eq!(amp.lines().count(), 2, "{amp}");
        assert!(amp.starts_with("pq.n/procs"), "{amp}");
    }

    #[test]
    fn three_significant_digits() {
        let cases = [
            (174_123.0, "174k"),
            (2_100.0, "2.10k"),
            (1_190_000.0, "1.19M"),
            (40_000.0, "40.0k"),
            (950.0, "950"),
            (12.34, "12.3"),
            (1.0, "1.00"),
            (0.1234, "0.123"),
            (0.0, "0"),
            (f64::NAN, "-"),
            (2.5e9, "2.50G"),
        ];
        for (x, want) in cases {
            assert_eq!(sig3(x), want, "{x}");
        }
    }

    #[test]
    fn aligns_columns() {
        let h = vec!["step".to_string(), "a".into(), "bbbb".into()];
        let rows = vec![vec!["load".to_string(), "1".into(), "22".into()]];
        assert_eq!(render(&h, &rows), "step  a  bbbb\nload  1    22\n");
    }

    #[test]
    fn builds_the_tables() {
        let mut a = Row::failed("larch", "first-fit/pwrite", "load", "x".into());
        a.ops = 100_000.0;
        a.error = None;
        a.p50_us = 5.0;
        a.p99_us = 9.0;
        a.p999_us = 12.0;
        let b = Row::failed("lmdb", "default", "load", "boom".into());
        let mut c = a.clone();
        c.step = "pq.1".into();
        let rows = vec![a, b, c];
        let ops = ops_table(&rows, &["load", "ows.1", "pq.1"]);
        assert!(
            ops.starts_with("ops/s  larch first-fit/pwrite    lmdb\n"),
            "{ops}"
        );
        assert!(
            ops.contains("load                     100k  failed"),
            "{ops}"
        );
        assert!(!ops.contains("ows.1"));
        let lat = latency_table(&rows, &["load"]);
        assert!(lat.contains("5.00/9.00/12.0"), "{lat}");
        let amp = amp_table(&rows, "load");
        assert!(amp.lines().next().unwrap().starts_with("load"));
        assert!(amp.contains("failed"));
        assert_eq!(amp.lines().count(), 3);
        assert_eq!(tenths_table(&rows), "");
        let mut t = rows[0].clone();
        t.step = "ib.l.i1".into();
        t.tenths = Some(vec![2000.0; 10]);
        let tt = tenths_table(&[t]);
        assert!(
            tt.contains("ib.l.i1") && tt.contains("2.00k") && tt.contains("10/10"),
            "{tt}"
        );
    }
}
