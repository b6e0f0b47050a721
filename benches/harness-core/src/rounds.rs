//! `--rounds N`: every engine/setup runs N times in one run, and each step reports the round
//! whose ops is the median. On a shared, noisy machine the ratios of one run move by +-20%
//! from run to run, and the first process of a run is sometimes slower; a median of rounds
//! taken in the same run is steadier and is still a same-run ratio.
//!
//! Order: round 1 runs the engine/setups in `--engines` order, round 2 in reverse, round 3
//! forward again, and so on. An engine's place in a round (first after the limits, or right
//! after an engine whose writes the device is still draining) then falls on each engine in
//! turn instead of always on the same one. The limits run once, before the first round and
//! after the last, as without rounds. Every round's child gets the run's seed: the same keys,
//! values and operations, on a database it makes afresh.
//!
//! Median: for each engine, setup, step and `reader_processes`, the reported row is the whole
//! row of one round, so its latency and amplification columns belong with its ops: the round
//! whose ops is the median (the lower median of an even count; equal ops: the earlier round).
//! A round that failed (ops NaN) makes the step failed: the first failed round's row is
//! reported.

use serde::Serialize;

use crate::report::{self, Row};
use crate::table::{self, sig3};

/// Whether round `round` (from 1) runs the engine/setups in reverse.
pub fn reversed(round: usize) -> bool {
    round.is_multiple_of(2)
}

/// The engine/setup jobs of `rounds` rounds of `jobs` jobs, in run order: (round from 1,
/// index of the job in `--engines` order).
pub fn order(jobs: usize, rounds: usize) -> Vec<(usize, usize)> {
    let mut out = Vec::with_capacity(jobs * rounds);
    for round in 1..=rounds {
        let mut idx: Vec<usize> = (0..jobs).collect();
        if reversed(round) {
            idx.reverse();
        }
        out.extend(idx.into_iter().map(|j| (round, j)));
    }
    out
}

/// One engine/setup's row of one step in one round.
#[derive(Clone, Debug, PartialEq)]
pub struct RoundRow {
    /// The round, from 1.
    pub round: usize,
    /// What the child of that round reported.
    pub row: Row,
}

/// The rounds of one engine, setup, step and `reader_processes`.
fn same_step(a: &Row, b: &Row) -> bool {
    a.engine == b.engine
        && a.setup == b.setup
        && a.step == b.step
        && a.reader_processes == b.reader_processes
}

fn failed(r: &Row) -> bool {
    !r.ops.is_finite()
}

/// `rows` grouped by engine, setup, step and `reader_processes`, the groups in the order
/// their first row comes, each group's rows in that order too (run order: rounds ascending).
fn groups(rows: &[RoundRow]) -> Vec<Vec<&RoundRow>> {
    let mut out: Vec<Vec<&RoundRow>> = Vec::new();
    for r in rows {
        match out.iter_mut().find(|g| same_step(&g[0].row, &r.row)) {
            Some(g) => g.push(r),
            None => out.push(vec![r]),
        }
    }
    out
}

/// The round reported of one step's rounds (not empty): the first failed one, else the one
/// with the median ops (the lower median of an even count; equal ops: the earlier round).
fn reported<'r>(group: &[&'r RoundRow]) -> &'r RoundRow {
    if let Some(f) = group.iter().find(|r| failed(&r.row)) {
        return f;
    }
    let mut by_ops = group.to_vec();
    // Stable: rounds with equal ops stay in run order.
    by_ops.sort_by(|a, b| a.row.ops.total_cmp(&b.row.ops));
    by_ops[(by_ops.len() - 1) / 2]
}

/// The reported rows: one per engine, setup, step and `reader_processes`, in the order of the
/// first round that has it (round 1's, the `--engines` order), each the whole row of its
/// median round. With one round: the rows as they are.
pub fn median_rows(rows: &[RoundRow]) -> Vec<Row> {
    groups(rows)
        .iter()
        .map(|g| reported(g).row.clone())
        .collect()
}

/// One cell of the rounds table: every round's ops in run order, then the median and how
/// far the lowest and highest round are from it.
fn cell(group: &[&RoundRow]) -> String {
    let each: Vec<String> = group
        .iter()
        .map(|r| {
            if failed(&r.row) {
                "failed".into()
            } else {
                sig3(r.row.ops)
            }
        })
        .collect();
    let each = each.join(" ");
    if group.iter().any(|r| failed(&r.row)) {
        return format!("{each} (a round failed)");
    }
    let median = reported(group).row.ops;
    if median <= 0.0 {
        return format!("{each} (median {})", sig3(median));
    }
    let (lo, hi) = group.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), r| {
        (lo.min(r.row.ops), hi.max(r.row.ops))
    });
    format!(
        "{each} (median {}, range {:.2}-{:.2}x of it)",
        sig3(median),
        lo / median,
        hi / median
    )
}

/// The rounds table: one line per step label (following `order`, as the ops table), one
/// column per engine/setup, each cell every round's ops in run order and their spread.
pub fn rounds_table(rows: &[RoundRow], order: &[&str]) -> String {
    let reported = median_rows(rows);
    let cols = table::labels(&reported);
    let mut header = vec!["rounds: ops/s".to_string()];
    header.extend(cols.iter().cloned());
    let groups = groups(rows);
    let body: Vec<Vec<String>> = table::step_names(&reported, order)
        .iter()
        .map(|step| {
            let mut line = vec![step.clone()];
            for c in &cols {
                let g = groups
                    .iter()
                    .find(|g| g[0].row.label() == *c && g[0].row.step_label() == *step);
                line.push(g.map_or(String::new(), |g| cell(g)));
            }
            line
        })
        .collect();
    table::render(&header, &body)
}

/// The line under the rounds table.
pub fn legend(rounds: usize) -> String {
    format!(
        "rounds: the ops/s of each of {rounds} rounds in run order (odd rounds ran the engine/setups in --engines order, even rounds reversed; every round on the run's seed); the other tables, results.csv and chart.svg report each step's median round, the whole row of it (the lower median of an even count; a failed round makes the step failed); range: the slowest and fastest round over the median."
    )
}

/// What results.json's `method` says about the rounds.
pub fn method() -> String {
    "config.rounds (--rounds) rounds of every engine/setup in the run, the limits once before and after them: odd rounds in --engines order, even rounds reversed (so an engine's place in a round, first or right after another engine's writes, falls on each engine in turn), each child on the run's seed and a database of its own made afresh; rows, details, results.csv and chart.svg hold, per engine, setup, step and reader_processes, the whole row of the round whose ops is the median (the lower median of an even count; equal ops: the earlier round; a failed round, ops null, makes the step failed and is the row reported); every round's rows are in rounds (rows and details, each with its round first) and in rounds.csv".into()
}

/// rounds.csv: results.csv's columns after a `round` column, one line per row of every round,
/// in run order.
pub fn rounds_csv(rows: &[RoundRow]) -> String {
    let mut out = format!("round,{}\n", report::csv_header());
    for r in rows {
        out.push_str(&format!("{},{}\n", r.round, report::csv_line(&r.row)));
    }
    out
}

/// A row, or its details, with its round before its own fields.
#[derive(Serialize)]
struct InRound<T> {
    round: usize,
    #[serde(flatten)]
    fields: T,
}

/// The `rounds` object of results.json: `rows` and `details` as at the top of the file, of
/// every round in run order, each object with its `round` first.
#[derive(Serialize)]
pub struct RoundsJson<'a> {
    rows: Vec<InRound<&'a Row>>,
    details: Vec<InRound<report::Details<'a>>>,
}

/// Every round's rows for results.json ([`RoundsJson`]).
pub fn rounds_json(rows: &[RoundRow]) -> RoundsJson<'_> {
    RoundsJson {
        rows: rows
            .iter()
            .map(|r| InRound {
                round: r.round,
                fields: &r.row,
            })
            .collect(),
        details: rows
            .iter()
            .map(|r| InRound {
                round: r.round,
                fields: r.row.details(),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A row of `engine` (setup `default`) in `step` with `ops` (no NaN: rows compare equal).
    fn row(engine: &str, step: &str, ops: f64) -> Row {
        Row {
            engine: engine.into(),
            setup: "default".into(),
            step: step.into(),
            ops,
            p99_us: ops / 1000.0,
            ..Row::default()
        }
    }

    fn rounds(rows: &[(usize, Row)]) -> Vec<RoundRow> {
        rows.iter()
            .map(|(round, row)| RoundRow {
                round: *round,
                row: row.clone(),
            })
            .collect()
    }

    #[test]
    fn even_rounds_run_the_jobs_reversed() {
        assert_eq!(
            order(3, 3),
            vec![
                (1, 0),
                (1, 1),
                (1, 2),
                (2, 2),
                (2, 1),
                (2, 0),
                (3, 0),
                (3, 1),
                (3, 2),
            ]
        );
        assert_eq!(order(2, 1), vec![(1, 0), (1, 1)]);
        assert_eq!(order(0, 3), vec![]);
        assert!(!reversed(1) && reversed(2) && !reversed(3) && reversed(4));
    }

    #[test]
    fn odd_rounds_report_the_middle_one() {
        let rs = rounds(&[
            (1, row("larch", "load", 132_000.0)),
            (1, row("lmdb", "load", 90_000.0)),
            (2, row("lmdb", "load", 95_000.0)),
            (2, row("larch", "load", 158_000.0)),
            (3, row("larch", "load", 141_000.0)),
            (3, row("lmdb", "load", 70_000.0)),
        ]);
        let got = median_rows(&rs);
        // Round 1's order (the --engines order), whole rows of the median round.
        assert_eq!(got, vec![rs[4].row.clone(), rs[1].row.clone()]);
        assert_eq!(got[0].p99_us, 141.0);
    }

    #[test]
    fn even_rounds_report_the_lower_median() {
        let rs = rounds(&[
            (1, row("larch", "ows.1", 400.0)),
            (2, row("larch", "ows.1", 100.0)),
            (3, row("larch", "ows.1", 300.0)),
            (4, row("larch", "ows.1", 200.0)),
        ]);
        assert_eq!(median_rows(&rs), vec![rs[3].row.clone()]);
        let two = rounds(&[
            (1, row("larch", "ows.1", 500.0)),
            (2, row("larch", "ows.1", 400.0)),
        ]);
        assert_eq!(median_rows(&two), vec![two[1].row.clone()]);
        // Equal ops: the earlier round.
        let mut tie = rounds(&[
            (1, row("larch", "ows.1", 500.0)),
            (2, row("larch", "ows.1", 500.0)),
        ]);
        tie[1].row.p99_us = 1.0;
        assert_eq!(median_rows(&tie), vec![tie[0].row.clone()]);
    }

    #[test]
    fn a_failed_round_makes_the_step_failed() {
        let mut boom = Row::failed("larch", "default", "pq.1", "boom".into());
        boom.reader_processes = 0;
        let rs = rounds(&[
            (1, row("larch", "pq.1", 1000.0)),
            (1, row("larch", "load", 10.0)),
            (2, boom.clone()),
            (2, row("larch", "load", 20.0)),
            (3, row("larch", "pq.1", 900.0)),
            (3, row("larch", "load", 30.0)),
        ]);
        let got = median_rows(&rs);
        assert_eq!(got.len(), 2);
        assert!(got[0].ops.is_nan());
        assert_eq!(got[0].error.as_deref(), Some("boom"));
        assert_eq!(got[1], rs[3].row);
        let t = rounds_table(&rs, &["load", "pq.1"]);
        assert!(t.contains("1.00k failed 900 (a round failed)"), "{t}");
    }

    #[test]
    fn rows_are_matched_by_step_and_reader_processes() {
        let procs = |ops: f64| {
            let mut r = row("larch", "pq.n", ops);
            r.reader_processes = 2;
            r
        };
        let mut other_setup = row("larch", "pq.n", 1.0);
        other_setup.setup = "null/mmap".into();
        let rs = rounds(&[
            (1, row("larch", "pq.n", 100.0)),
            (1, procs(10.0)),
            (1, other_setup.clone()),
            (2, row("larch", "pq.n", 300.0)),
            (2, procs(30.0)),
            (2, other_setup.clone()),
            (3, row("larch", "pq.n", 200.0)),
            (3, procs(20.0)),
            (3, other_setup),
        ]);
        let got = median_rows(&rs);
        assert_eq!(got.len(), 3);
        assert_eq!((got[0].ops, got[0].reader_processes), (200.0, 0), "{got:?}");
        assert_eq!((got[1].ops, got[1].reader_processes), (20.0, 2));
        assert_eq!((got[2].ops, got[2].setup.as_str()), (1.0, "null/mmap"));
        let t = rounds_table(&rs, &["pq.n"]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3, "{t}");
        assert!(lines[1].starts_with("pq.n "), "{t}");
        assert!(lines[1].contains("100 300 200 (median 200, range 0.50-1.50x of it)"));
        assert!(lines[2].starts_with("pq.n/procs"), "{t}");
        assert!(lines[2].contains("10.0 30.0 20.0 (median 20.0, range 0.50-1.50x of it)"));
    }

    #[test]
    fn the_rounds_table_has_a_column_per_engine_and_a_line_per_step() {
        let rs = rounds(&[
            (1, row("larch", "load", 132_000.0)),
            (1, row("larch", "owa.1", 5_000.0)),
            (1, row("lmdb", "load", 90_000.0)),
            (1, row("lmdb", "owa.1", 4_000.0)),
            (2, row("lmdb", "load", 95_000.0)),
            (2, row("lmdb", "owa.1", 4_000.0)),
            (2, row("larch", "load", 158_000.0)),
            (2, row("larch", "owa.1", 5_000.0)),
            (3, row("larch", "load", 141_000.0)),
            (3, row("larch", "owa.1", 5_000.0)),
            (3, row("lmdb", "load", 70_000.0)),
            (3, row("lmdb", "owa.1", 4_000.0)),
        ]);
        let t = rounds_table(&rs, &["load", "ows.1", "owa.1"]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3, "{t}");
        assert!(lines[0].starts_with("rounds: ops/s"), "{t}");
        assert!(
            lines[0].contains("larch") && lines[0].ends_with("lmdb"),
            "{t}"
        );
        assert!(
            lines[1].starts_with("load")
                && lines[1].contains("132k 158k 141k (median 141k, range 0.94-1.12x of it)")
                && lines[1].contains("90.0k 95.0k 70.0k (median 90.0k, range 0.78-1.06x of it)"),
            "{t}"
        );
        assert!(lines[2].starts_with("owa.1"), "{t}");
    }

    #[test]
    fn rounds_csv_has_a_round_column_and_every_row() {
        let rs = rounds(&[
            (1, row("larch", "load", 100.0)),
            (1, row("lmdb", "load", 50.0)),
            (2, row("lmdb", "load", 60.0)),
            (2, Row::failed("larch", "default", "load", "x, y".into())),
        ]);
        let text = rounds_csv(&rs);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1 + rs.len());
        assert_eq!(lines[0], format!("round,{}", report::csv_header()));
        let plain = report::results_csv(&rs.iter().map(|r| r.row.clone()).collect::<Vec<_>>());
        // The same cells as results.csv, after the round.
        for (line, (r, csv)) in lines[1..].iter().zip(rs.iter().zip(plain.lines().skip(1))) {
            assert_eq!(*line, format!("{},{csv}", r.round));
        }
        assert!(lines[4].starts_with("2,larch,default,load,,"), "{text}");
    }

    #[test]
    fn results_json_keeps_every_round() {
        let rs = rounds(&[
            (1, row("larch", "load", 100.0)),
            (2, row("larch", "load", 300.0)),
            (3, row("larch", "load", 200.0)),
        ]);
        let rows = median_rows(&rs);
        let text = report::results_json_with(&(), &(), &rows, Some(&rounds_json(&rs)));
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["rows"].as_array().unwrap().len(), 1);
        assert_eq!(v["rows"][0]["ops"], 200);
        let each = v["rounds"]["rows"].as_array().unwrap();
        assert_eq!(each.len(), 3);
        assert_eq!(each[1]["round"], 2);
        assert_eq!(each[1]["ops"], 300);
        let keys: Vec<&str> = each[0]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(keys[0], "round");
        assert_eq!(keys[1..], report::ROW_FIELDS[..]);
        assert_eq!(v["rounds"]["details"][2]["round"], 3);
        assert_eq!(v["rounds"]["details"][2]["step"], "load");
        // The rows of the file are still the first row objects.
        assert_eq!(report::row_keys(&text), report::ROW_FIELDS.to_vec());
    }

    #[test]
    fn one_round_is_the_output_without_rounds() {
        let mut procs = row("larch", "pq.n", 5.0);
        procs.reader_processes = 2;
        let rows = vec![
            row("larch", "load", 100.0),
            Row::failed("lmdb", "default", "load", "boom".into()),
            row("larch", "pq.n", 7.0),
            procs,
            row("lmdb", "pq.n", 9.0),
        ];
        let one: Vec<RoundRow> = rows
            .iter()
            .map(|r| RoundRow {
                round: 1,
                row: r.clone(),
            })
            .collect();
        let got = median_rows(&one);
        assert_eq!(got.len(), rows.len());
        for (g, r) in got.iter().zip(&rows) {
            // Row's PartialEq fails on NaN: compare the line, every field as text.
            assert_eq!(g.to_line(), r.to_line());
        }
        let order = ["load", "pq.n"];
        assert_eq!(
            table::ops_table(&got, &order),
            table::ops_table(&rows, &order)
        );
        assert_eq!(report::results_csv(&got), report::results_csv(&rows));
        assert_eq!(
            report::results_json_with(&(), &(), &got, None::<&()>),
            report::results_json(&(), &(), &rows)
        );
    }
}
