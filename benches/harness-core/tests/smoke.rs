//! The whole harness on a tiny size with larch alone: parent, child processes, every step,
//! the limits, and the three output files. No timing assertions: only that every step ran,
//! did some operations, and that the outputs have the documented shape.

use std::process::Command;

use larch_bench_core::report::{row_keys, ROW_FIELDS};

/// Run `larch-workload ARGS --out OUT`, require success; its stdout and stderr.
fn run_workload(args: &[&str], out: &std::path::Path) -> (String, String) {
    let run = Command::new(env!("CARGO_BIN_EXE_larch-workload"))
        .args(args)
        .arg("--out")
        .arg(out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
    assert!(run.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    (stdout, stderr)
}

/// results.csv of a run in `out`: the whole text, to split with [`table`].
fn results_csv(out: &std::path::Path) -> String {
    std::fs::read_to_string(out.join("results.csv")).unwrap()
}

/// `csv` as its header and rows of fields.
fn table(csv: &str) -> (Vec<&str>, Vec<Vec<&str>>) {
    let mut lines = csv.lines();
    let header = lines.next().unwrap().split(',').collect();
    (header, lines.map(|l| l.split(',').collect()).collect())
}

/// The index of column `name` in `header`.
fn col(header: &[&str], name: &str) -> usize {
    header.iter().position(|h| *h == name).unwrap()
}

#[test]
fn the_harness_runs_every_step_of_larch_end_to_end() {
    let out = tempfile::tempdir().unwrap();
    let (stdout, _) = run_workload(
        &[
            "--docs",
            "3000",
            "--secs",
            "0.05",
            "--threads",
            "2",
            "--seed",
            "7",
            "--larch-setups",
            "first-fit/pwrite,null/mmap",
            "--rb-load",
            "3000",
            "--rb-ins1",
            "5",
            "--rb-batches",
            "3",
            "--rb-batch",
            "100",
            "--rb-insa",
            "50",
            "--rb-sorted",
            "500",
        ],
        out.path(),
    );

    // The table: engines as columns, steps as rows, then the per-step tables.
    let header = stdout.lines().find(|l| l.starts_with("ops/s")).unwrap();
    assert!(
        header.contains("  larch first-fit/pwrite  larch null/mmap  limit fdatasync-4k"),
        "{stdout}"
    );
    assert!(stdout.contains("limit fdatasync-4k"), "{stdout}");
    for step in [
        "load",
        "ows.1",
        "ows.n",
        "pqw.n",
        "rqw.1",
        "pq.n",
        "rq.1",
        "owa.n",
        "ib.l.i0",
        "ib.l.x",
        "ib.l.i1",
        "ib.qr100",
        "ib.qp100",
        "rb.load",
        "rb.ins1",
        "rb.insb",
        "rb.insa",
        "rb.sorted",
    ] {
        assert!(
            stdout.lines().any(|l| l.starts_with(step)),
            "no {step} row:\n{stdout}"
        );
    }
    assert!(stdout.contains("ops      db.mb  r/o  mf/o"), "{stdout}");

    // results.json: the documented row objects.
    let json = std::fs::read_to_string(out.path().join("results.json")).unwrap();
    assert_eq!(row_keys(&json), ROW_FIELDS.to_vec());
    for key in [
        "\"machine\": {",
        "\"config\": {",
        "\"rows\": [",
        "\"engines\": {",
    ] {
        assert!(json.contains(key), "{key} missing");
    }
    assert!(json.contains("\"seed\": \"7\""));

    // results.csv: 2 setups x (13 + 5 insert benchmark + 5 redb shapes) steps, fdatasync
    // before and after (ows.1) and the BTreeMap (4 read steps).
    let csv = results_csv(out.path());
    let (header, rows) = table(&csv);
    let col = |name: &str| col(&header, name);
    assert_eq!(rows.len(), 2 * (13 + 5 + 5) + 2 + 4, "{csv}");
    for r in &rows {
        assert_eq!(r[col("error")], "", "a step failed: {r:?}");
        let ops: f64 = r[col("ops")].parse().unwrap();
        assert!(ops > 0.0, "{r:?}");
        let total: u64 = r[col("ops_total")].parse().unwrap();
        assert!(total > 0, "{r:?}");
    }
    let larch_load = rows
        .iter()
        .find(|r| r[col("engine")] == "larch" && r[col("step")] == "load")
        .unwrap();
    assert_eq!(larch_load[col("ops_total")], "3000");
    assert!(larch_load[col("db_bytes")].parse::<u64>().unwrap() > 0);
    let pqw = rows
        .iter()
        .find(|r| r[col("engine")] == "larch" && r[col("step")] == "pqw.1")
        .unwrap();
    assert!(
        !pqw[col("writer_ops")].is_empty(),
        "the limited writer ran: {pqw:?}"
    );

    // The insert benchmark: 3,000 rows (the --docs), each tenth of ib.l.i1 has a rate, and
    // the table after the step keeps 3,000 rows' worth.
    let ib = |step: &str| {
        rows.iter()
            .find(|r| r[col("engine")] == "larch" && r[col("step")] == step)
            .unwrap()
    };
    assert_eq!(ib("ib.l.i0")[col("ops_total")], "3000");
    assert_eq!(ib("ib.l.x")[col("ops_total")], "3000");
    assert_eq!(ib("ib.l.i1")[col("ops_total")], "3000");
    let tenths: Vec<f64> = ib("ib.l.i1")[col("tenths")]
        .split(';')
        .map(|x| x.parse().unwrap())
        .collect();
    assert_eq!(tenths.len(), 10);
    assert!(tenths.iter().all(|x| *x > 0.0), "{tenths:?}");
    assert!(!ib("ib.qr100")[col("writer_ops")].is_empty());

    // redb's write shapes: the keys of each step, in their own database (rb.load's file
    // holds only its 3,000 keys, not the ForestDB documents).
    for (step, keys) in [
        ("rb.load", "3000"),
        ("rb.ins1", "5"),
        ("rb.insb", "300"),
        ("rb.insa", "50"),
        ("rb.sorted", "500"),
    ] {
        assert_eq!(ib(step)[col("ops_total")], keys, "{step}");
    }
    let s_amp: f64 = ib("rb.load")[col("space_amp")].parse().unwrap();
    assert!(s_amp > 0.5 && s_amp < 20.0, "{s_amp}");
    assert!(stdout.contains("rb.*: ops = keys/s"), "{stdout}");
    assert!(stdout.contains("ib.l.i1 rows/s per tenth"), "{stdout}");
    assert!(out.path().join("ib-tenths.svg").is_file());

    let svg = std::fs::read_to_string(out.path().join("chart.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("owa.n"));
    // The database directory was removed; the raw rows stay.
    assert!(!out.path().join("db").exists());
    assert!(out.path().join("raw").is_dir());
}

#[test]
fn bad_options_are_usage_errors() {
    let run = Command::new(env!("CARGO_BIN_EXE_larch-workload"))
        .args(["--steps", "load,nope"])
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&run.stderr).contains("unknown step"));
    let run = Command::new(env!("CARGO_BIN_EXE_larch-workload"))
        .args(["--engines", "lmdb"])
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&run.stderr).contains("unknown engine"));
    let run = Command::new(env!("CARGO_BIN_EXE_larch-workload"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(run.status.success());
    assert!(String::from_utf8_lossy(&run.stdout).contains("--larch-setups"));
}

#[test]
fn a_load_advice_setup_reads_the_loaded_file_after_reopening_it() {
    let out = tempfile::tempdir().unwrap();
    let setup = "append-run/pwrite:load-advice=random:advice=sequential";
    let (_, stderr) = run_workload(
        &[
            "--docs",
            "2000",
            "--secs",
            "0.05",
            "--seed",
            "9",
            "--no-limits",
            "--steps",
            "load,pq.1,ows.1",
            "--larch-setups",
            setup,
        ],
        out.path(),
    );
    assert!(
        stderr.contains("(reopened after load as append-run/pwrite:advice=sequential)"),
        "{stderr}"
    );
    // pq.1 fails on the first key it does not find, so its rows prove the reopened file
    // holds the whole load.
    let csv = results_csv(out.path());
    let (header, rows) = table(&csv);
    let col = |name: &str| col(&header, name);
    assert_eq!(rows.len(), 3, "{csv}");
    for r in &rows {
        assert_eq!(r[col("setup")], setup);
        assert_eq!(r[col("error")], "", "a step failed: {r:?}");
        assert!(r[col("ops_total")].parse::<u64>().unwrap() > 0, "{r:?}");
    }
    let json = std::fs::read_to_string(out.path().join("results.json")).unwrap();
    assert!(
        json.contains("random (then closed and reopened with advice sequential)"),
        "{json}"
    );
}

#[test]
fn reader_processes_read_the_engines_file_from_other_processes() {
    let out = tempfile::tempdir().unwrap();
    let (stdout, _) = run_workload(
        &[
            "--docs",
            "2000",
            "--secs",
            "0.05",
            "--threads",
            "2",
            "--seed",
            "11",
            "--no-limits",
            "--steps",
            "ows.1,pq.n,rq.n,owa.1",
            "--readers",
            "both",
        ],
        out.path(),
    );
    // The tables say which mode each read step ran in: threads, then processes.
    for label in ["pq.n ", "pq.n/procs ", "rq.n ", "rq.n/procs "] {
        assert!(
            stdout.lines().any(|l| l.starts_with(label)),
            "no {label} row:\n{stdout}"
        );
    }
    // pq.n fails on the first key it does not find: the reader processes saw the whole file,
    // after the writer's commits; the writer committed again after they detached.
    let csv = results_csv(out.path());
    let (header, rows) = table(&csv);
    let col = |name: &str| col(&header, name);
    let got: Vec<String> = rows
        .iter()
        .map(|r| format!("{}:{}", r[col("step")], r[col("reader_processes")]))
        .collect();
    assert_eq!(
        got,
        vec!["ows.1:0", "pq.n:0", "pq.n:2", "rq.n:0", "rq.n:2", "owa.1:0"],
        "{csv}"
    );
    for r in &rows {
        assert_eq!(r[col("error")], "", "a step failed: {r:?}");
        assert!(r[col("ops_total")].parse::<u64>().unwrap() > 0, "{r:?}");
    }
    let json = std::fs::read_to_string(out.path().join("results.json")).unwrap();
    assert!(json.contains("\"readers\": \"both\""), "{json}");
}
