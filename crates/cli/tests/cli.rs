//! Runs the built `larch` binary on real files in temporary directories: every subcommand,
//! every exit code, dump/load round trips, `--json` outputs, damaged files, read-only
//! commands leaving the file untouched, and live databases: read-only commands and `copy`
//! while this test process writes, `readers` listing its snapshots and a killed child's.

mod support;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;
use support::json::{self, Get};

const BIN: &str = env!("CARGO_BIN_EXE_larch");
const PS: usize = 4096;

/// What one run of the binary did.
struct Run {
    code: i32,
    stdout: String,
    stdout_bytes: Vec<u8>,
    stderr: String,
}

fn run_with(args: &[&str], stdin: &[u8]) -> Run {
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn larch");
    let mut input = child.stdin.take().unwrap();
    let data = stdin.to_vec();
    // Write from a thread: a large input would otherwise deadlock against a full stdout pipe.
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(&data);
    });
    let out: Output = child.wait_with_output().expect("wait for larch");
    writer.join().unwrap();
    let run = Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stdout_bytes: out.stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert!(
        !run.stderr.contains("panicked"),
        "larch {args:?} panicked: {}",
        run.stderr
    );
    run
}

fn run(args: &[&str]) -> Run {
    run_with(args, b"")
}

/// Run and require exit 0.
fn ok(args: &[&str]) -> Run {
    let r = run(args);
    assert_eq!(r.code, 0, "larch {args:?} failed: {}{}", r.stdout, r.stderr);
    r
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A database with `n` text records in `main` and a second tree, loaded through `larch load`.
fn sample_db(dir: &Path, n: usize) -> PathBuf {
    let path = dir.join("sample.larch");
    let mut input = String::new();
    for i in 0..n {
        input.push_str(&format!(
            "{}\t{}\n",
            hex(format!("key{i:06}").as_bytes()),
            hex(&vec![b'v'; 40 + i % 60])
        ));
    }
    let r = run_with(&["load", s(&path), "--batch", "500"], input.as_bytes());
    assert_eq!(r.code, 0, "{}", r.stderr);
    ok(&["put", s(&path), "alice", "1", "--tree", "users"]);
    path
}

fn parse_json(r: &Run) -> Value {
    json::parse(&r.stdout).unwrap_or_else(|e| panic!("invalid JSON ({e}): {}", r.stdout))
}

fn pages_json(path: &Path) -> Value {
    parse_json(&ok(&["pages", s(path), "--json"]))
}

const READ_ONLY: &[&[&str]] = &[
    &["get", "F", "key000001"],
    &["dump", "F"],
    &["trees", "F"],
    &["info", "F"],
    &["info", "F", "--json"],
    &["stat", "F"],
    &["stat", "F", "--json"],
    &["check", "F"],
    &["check", "F", "--json"],
    &["pages", "F"],
    &["pages", "F", "--json"],
    &["page", "F", "0", "--raw"],
    &["page", "F", "1"],
    &["page", "F", "2", "--raw"],
    &["readers", "F"],
    &["readers", "F", "--json"],
];

fn with_file<'a>(args: &[&'a str], file: &'a str) -> Vec<&'a str> {
    args.iter()
        .map(|&a| if a == "F" { file } else { a })
        .collect()
}

#[test]
fn demo_builds_checks_and_reports() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("demo.larch");
    let r = ok(&["demo", "--count", "25000", "--path", s(&path)]);
    for phase in [
        "load",
        "read",
        "scan",
        "delete",
        "check",
        "ops/s",
        "dead ratio",
        "depth",
    ] {
        assert!(r.stdout.contains(phase), "no {phase:?} in {}", r.stdout);
    }
    assert!(r.stdout.trim_end().ends_with("check: ok"), "{}", r.stdout);
    // The file was kept and holds the surviving half.
    let stat = parse_json(&ok(&["stat", s(&path), "--json"]));
    assert_eq!(stat.field("trees").arr()[0].field("entries").u64(), 12500);
    // A path that exists is refused rather than overwritten.
    let again = run(&["demo", "--count", "10", "--path", s(&path)]);
    assert_eq!(again.code, 1);
    assert!(again.stderr.contains("already exists"), "{}", again.stderr);
    // Without --path it uses (and removes) a temporary directory.
    let r = ok(&["demo", "--count", "100"]);
    assert!(r.stdout.contains("check: ok"));
}

#[test]
fn put_get_del_and_their_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("kv.larch");
    let f = s(&f);
    ok(&["put", f, "alice", "1"]);
    ok(&["put", f, "bob", "two words"]);
    ok(&["put", f, "alice", "3"]); // overwrite
    assert_eq!(ok(&["get", f, "alice"]).stdout, "3\n");
    assert_eq!(ok(&["get", f, "bob"]).stdout, "two words\n");
    assert_eq!(ok(&["get", f, "616c696365", "--hex"]).stdout, "33\n");

    let absent = run(&["get", f, "carol"]);
    assert_eq!(absent.code, 1);
    assert!(
        absent.stderr.starts_with("larch: ") && absent.stderr.contains("carol"),
        "{}",
        absent.stderr
    );
    assert_eq!(run(&["get", f, "alice", "--tree", "nope"]).code, 1);

    ok(&["put", f, "00ff", "DEAD", "--hex", "--tree", "bin"]);
    assert_eq!(
        ok(&["get", f, "00FF", "--hex", "--tree", "bin"]).stdout,
        "dead\n"
    );
    assert_eq!(ok(&["trees", f]).stdout, "bin\nmain\n");

    ok(&["del", f, "alice"]);
    assert_eq!(run(&["get", f, "alice"]).code, 1);
    assert_eq!(
        run(&["del", f, "alice"]).code,
        1,
        "deleting an absent key exits 1"
    );
    let no_tree = run(&["del", f, "x", "--tree", "missing"]);
    assert_eq!(no_tree.code, 1);
    assert_eq!(
        ok(&["trees", f]).stdout,
        "bin\nmain\n",
        "del must not create a tree"
    );
    ok(&["del", f, "00ff", "--hex", "--tree", "bin"]);

    // Malformed hex arguments are usage errors.
    assert_eq!(run(&["get", f, "zz", "--hex"]).code, 2);
    assert_eq!(run(&["put", f, "00", "abc", "--hex"]).code, 2);
    // Engine refusals are failures.
    assert_eq!(run(&["put", f, "", "v"]).code, 1, "empty key");

    // Read-only commands never create a missing file.
    let missing = dir.path().join("missing.larch");
    for args in [
        &["get", s(&missing), "k"][..],
        &["dump", s(&missing)],
        &["del", s(&missing), "k"],
    ] {
        let r = run(args);
        assert_eq!(r.code, 1, "{args:?}");
        assert!(
            r.stderr.contains("missing.larch"),
            "error names the file: {}",
            r.stderr
        );
    }
    assert!(!missing.exists());
}

#[test]
fn usage_errors_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("u.larch");
    let f = s(&f);
    for args in [
        &[][..],
        &["frobnicate"],
        &["get"],
        &["get", f],
        &["put", f, "k"],
        &["page", f, "notanumber"],
        &["load", f, "--batch", "0"],
        &["load", f, "--durability", "sometimes"],
        &["load", f, "--policy", "best-guess"],
        &["load", f, "--page-size", "5000"],
        &["load", f, "--write-mode", "carrier-pigeon"],
        &["info", f, "--bogus"],
    ] {
        let r = run(args);
        assert_eq!(r.code, 2, "larch {args:?}: {}", r.stderr);
    }
    assert!(
        !Path::new(f).exists(),
        "a usage error must not create the file"
    );
}

#[test]
fn help_on_every_subcommand_has_an_example() {
    let r = ok(&["--help"]);
    assert!(r.stdout.contains("Examples:"));
    for sub in [
        "demo", "load", "dump", "get", "put", "del", "trees", "info", "stat", "check", "pages",
        "page", "compact", "copy", "readers", "bench",
    ] {
        let r = ok(&[sub, "--help"]);
        assert!(
            r.stdout.contains("Example"),
            "{sub} --help has no example:\n{}",
            r.stdout
        );
        assert!(
            r.stdout.contains(&format!("larch {sub}")),
            "{sub} --help example does not use it"
        );
    }
}

#[test]
fn dump_load_round_trip_with_binary_keys_and_a_large_value() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.larch");
    let b = dir.path().join("b.larch");
    let mut records: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    for x in 0..=255u8 {
        records.push((vec![x], vec![x; x as usize % 7])); // includes empty values
        records.push((vec![x, 0, 255 - x], (0..=255u8).collect()));
    }
    let big: Vec<u8> = (0..3 << 20)
        .map(|i: u32| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    records.push((b"big".to_vec(), big.clone()));
    // Input in a scrambled order, uppercase hex: load must accept either case.
    let mut input = String::new();
    for (i, (k, v)) in records.iter().enumerate().rev() {
        let line = format!("{}\t{}\n", hex(k), hex(v));
        input.push_str(&if i % 2 == 0 {
            line.to_uppercase()
        } else {
            line
        });
    }
    let r = run_with(&["load", s(&a), "--batch", "100"], input.as_bytes());
    assert_eq!(r.code, 0, "{}", r.stderr);
    let commits: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(commits.len(), records.len().div_ceil(100));
    assert_eq!(
        *commits.last().unwrap(),
        format!("committed {} {}", commits.len(), records.len())
    );

    let dump_a = ok(&["dump", s(&a)]).stdout_bytes;
    records.sort();
    let expected: String = records
        .iter()
        .map(|(k, v)| format!("{}\t{}\n", hex(k), hex(v)))
        .collect();
    assert!(
        dump_a == expected.as_bytes(),
        "dump is not the sorted lowercase records"
    );

    let r = run_with(
        &[
            "load",
            s(&b),
            "--durability",
            "async",
            "--policy",
            "null",
            "--page-size",
            "8192",
        ],
        &dump_a,
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        ok(&["dump", s(&b)]).stdout_bytes == dump_a,
        "dump | load | dump changed the records"
    );
    assert_eq!(
        parse_json(&ok(&["info", s(&b), "--json"]))
            .field("page_size")
            .u64(),
        8192
    );
    let got = ok(&["get", s(&b), &hex(b"big"), "--hex"]).stdout;
    assert!(
        got.trim_end() == hex(&big),
        "large value differs after the round trip"
    );
    ok(&["check", s(&a)]);
    ok(&["check", s(&b)]);

    // The large value shows up in `pages` as one overflow page and its continuation run.
    let pages = pages_json(&a);
    let rows = pages.field("pages").arr();
    let first = rows
        .iter()
        .find(|r| r.field("overflow_len") == &Value::from(big.len()))
        .expect("overflow page");
    let id = first.field("id").u64() as usize;
    let run_len = (24 + big.len()).div_ceil(PS);
    for r in &rows[id + 1..id + run_len] {
        assert_eq!(r.field("type").str(), "overflow-cont");
    }
    let page = ok(&["page", s(&a), &id.to_string()]).stdout;
    assert!(
        page.contains("type: overflow") && page.contains(&format!("value length: {}", big.len())),
        "{page}"
    );
}

#[test]
fn load_commits_in_batches_and_stops_at_a_malformed_line() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("l.larch");
    let input = "01\t0a\n02\t0b\n\n03\t0c\n04\t0d\n05\t0e\n06\tnothex\n07\t0f\n";
    let r = run_with(
        &["load", s(&f), "--batch", "2", "--tree", "t"],
        input.as_bytes(),
    );
    assert_eq!(r.code, 1);
    assert_eq!(r.stdout, "committed 1 2\ncommitted 2 4\n");
    assert!(
        r.stderr.contains("line 7"),
        "names the line (blank lines count): {}",
        r.stderr
    );
    // Earlier commits stay; the aborted batch (05) does not.
    assert_eq!(
        ok(&["dump", s(&f), "--tree", "t"]).stdout,
        "01\t0a\n02\t0b\n03\t0c\n04\t0d\n"
    );
    ok(&["check", s(&f)]);

    // More malformed shapes, each exit 1 with the line number.
    for (bad, what) in [
        ("0102\n", "no tab"),
        ("\t00\n", "empty"),
        ("0\t00\n", "odd"),
        ("01\t00\t00\n", "value"),
    ] {
        let r = run_with(
            &["load", s(&f), "--tree", "u"],
            format!("aa\tbb\n{bad}").as_bytes(),
        );
        assert_eq!(r.code, 1, "{bad:?}");
        assert!(
            r.stderr.contains("line 2") && r.stderr.contains(what),
            "{bad:?}: {}",
            r.stderr
        );
    }

    // Empty input still creates the file and an empty tree.
    let e = dir.path().join("empty.larch");
    let r = run_with(&["load", s(&e), "--tree", "nothing"], b"");
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.stdout, "committed 1 0\n");
    assert_eq!(ok(&["trees", s(&e)]).stdout, "nothing\n");
    assert_eq!(ok(&["dump", s(&e), "--tree", "nothing"]).stdout, "");

    // Overwrites count as records and keep the last value; CRLF line endings are accepted.
    let r = run_with(
        &["load", s(&e), "--write-mode", "mmap"],
        b"61\t01\r\n61\t02\r\n",
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(ok(&["get", s(&e), "61", "--hex"]).stdout, "02\n");
}

#[test]
fn load_sorted_appends_and_names_the_first_line_out_of_order() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("s.larch");
    let input: String = (0..3000u32)
        .map(|i| format!("{}\t{}\n", hex(&i.to_be_bytes()), hex(&[i as u8; 20])))
        .collect();
    let r = run_with(
        &["load", s(&f), "--sorted", "--batch", "1000", "--tree", "t"],
        input.as_bytes(),
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        r.stdout,
        "committed 1 1000\ncommitted 2 2000\ncommitted 3 3000\n"
    );
    assert_eq!(ok(&["dump", s(&f), "--tree", "t"]).stdout, input);
    ok(&["check", s(&f)]);

    // Appending to the loaded tree: above its last key is fine, anything else stops the load
    // at that line, keeping the batches committed before it.
    let more = format!(
        "{}\t00\n{}\t01\n\n{}\t02\n",
        hex(&5000u32.to_be_bytes()),
        hex(&5001u32.to_be_bytes()),
        hex(&5001u32.to_be_bytes())
    );
    let r = run_with(
        &["load", s(&f), "--sorted", "--batch", "1", "--tree", "t"],
        more.as_bytes(),
    );
    assert_eq!(r.code, 1);
    assert_eq!(r.stdout, "committed 4 1\ncommitted 5 2\n");
    assert!(
        r.stderr.contains("line 4")
            && r.stderr.contains("not greater than the last key 00001389")
            && r.stderr.contains("ascending"),
        "{}",
        r.stderr
    );
    let r = run_with(&["load", s(&f), "--sorted", "--tree", "t"], b"00\t00\n");
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("line 1"), "{}", r.stderr);
    ok(&["check", s(&f)]);
    assert_eq!(
        ok(&[
            "get",
            s(&f),
            "--tree",
            "t",
            &hex(&5001u32.to_be_bytes()),
            "--hex"
        ])
        .stdout,
        "01\n"
    );
}

#[test]
fn info_reports_metas_and_space_as_text_and_json() {
    let dir = tempfile::tempdir().unwrap();
    let f = sample_db(dir.path(), 2000);
    let text = ok(&["info", s(&f)]).stdout;
    for line in [
        "page_size: 4096",
        "durable: yes",
        "trees: 2",
        "  main",
        "  users",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "no line {line:?} in:\n{text}"
        );
    }
    let r = ok(&["info", s(&f), "--json"]);
    assert!(r.stdout.contains("\"page_size\":4096"), "{}", r.stdout);
    let v = parse_json(&r);
    for key in [
        "page_size",
        "txid",
        "other_txid",
        "file_bytes",
        "high_water",
        "live_pages",
        "free_pages",
        "pending_pages",
        "dead_ratio",
        "trees",
        "meta_fallback",
    ] {
        assert!(v.has(key), "no {key:?} in {}", r.stdout);
    }
    let txid = v.field("txid").u64();
    assert_eq!(txid, 5, "four load commits and a put");
    assert_eq!(v.field("other_txid").u64(), txid - 1);
    assert_eq!(v.field("durable"), &Value::Bool(true));
    assert_eq!(v.field("meta_fallback"), &Value::Null);
    assert_eq!(
        v.field("file_bytes").u64(),
        std::fs::metadata(&f).unwrap().len()
    );
    let names: Vec<&str> = v.field("trees").arr().iter().map(Get::str).collect();
    assert_eq!(names, ["main", "users"]);
    let ratio = v.field("dead_ratio").num();
    assert!((0.0..1.0).contains(&ratio));
}

#[test]
fn stat_shows_each_tree() {
    let dir = tempfile::tempdir().unwrap();
    let f = sample_db(dir.path(), 3000);
    let text = ok(&["stat", s(&f)]).stdout;
    assert!(
        text.contains("tree \"main\"") && text.contains("tree \"users\""),
        "{text}"
    );
    assert!(
        text.contains("entries: 3000") && text.contains("depth: 2"),
        "{text}"
    );
    let v = parse_json(&ok(&["stat", s(&f), "--tree", "main", "--json"]));
    let trees = v.field("trees").arr();
    assert_eq!(trees.len(), 1);
    let t = &trees[0];
    assert_eq!(t.field("name").str(), "main");
    assert_eq!(t.field("entries").u64(), 3000);
    assert_eq!(t.field("depth").u64(), 2);
    assert_eq!(t.field("branch_pages").u64(), 1);
    assert!(t.field("leaf_pages").u64() > 10);
    assert_eq!(t.field("overflow_pages").u64(), 0);
    let fill = t.field("fill").num();
    assert!(fill > 0.3 && fill <= 1.0, "fill {fill}");
    assert_eq!(run(&["stat", s(&f), "--tree", "nope"]).code, 1);
}

#[test]
fn check_passes_a_sound_file() {
    let dir = tempfile::tempdir().unwrap();
    let f = sample_db(dir.path(), 1000);
    let r = ok(&["check", s(&f)]);
    assert_eq!(r.stdout.lines().next(), Some("ok"));
    let v = parse_json(&ok(&["check", s(&f), "--json"]));
    assert_eq!(v.field("ok"), &Value::Bool(true));
    assert!(v.field("problems").arr().is_empty());
    assert!(v.field("reachable_pages").u64() > 2);
}

#[test]
fn pages_lists_every_page_and_page_decodes_one() {
    let dir = tempfile::tempdir().unwrap();
    let f = sample_db(dir.path(), 2000);
    // Commits leave the free map behind; an in-place compaction's commits save it, so the
    // file has free-map pages to list.
    ok(&["compact", "--in-place", s(&f)]);
    let info = parse_json(&ok(&["info", s(&f), "--json"]));
    let v = pages_json(&f);
    let rows = v.field("pages").arr();
    assert_eq!(rows.len() as u64, info.field("high_water").u64());
    assert!(v.field("problems").arr().is_empty());
    let kind = |i: usize| rows[i].field("type").str().to_string();
    assert_eq!((kind(0), kind(1)), ("meta".into(), "meta".into()));
    let count = |t: &str, tree: &str| {
        rows.iter()
            .filter(|r| {
                r.field("type").str() == t && r.field("tree") == &Value::String(tree.into())
            })
            .count()
    };
    let stat = parse_json(&ok(&["stat", s(&f), "--json"]));
    let leaves: u64 = stat
        .field("trees")
        .arr()
        .iter()
        .map(|t| t.field("leaf_pages").u64())
        .sum();
    assert_eq!(count("leaf", "data") as u64, leaves);
    assert!(count("leaf", "catalog") >= 1 && count("leaf", "freemap") >= 1);
    let free = rows
        .iter()
        .filter(|r| r.field("type").str() == "free")
        .count() as u64;
    assert_eq!(
        free,
        info.field("high_water").u64() - info.field("live_pages").u64(),
        "free pages = dead pages"
    );
    for r in rows {
        assert!(
            ["meta", "branch", "leaf", "free"].contains(&r.field("type").str()),
            "unexpected row {r:?}"
        );
    }

    let table = ok(&["pages", s(&f)]).stdout;
    let mut lines = table.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["id", "type", "tree", "txid", "count", "overflow", "crc", "name"]
    );
    assert_eq!(lines.count(), rows.len());

    // A data leaf: header fields and its entries, hex and text.
    let leaf = rows
        .iter()
        .find(|r| {
            r.field("type").str() == "leaf" && r.field("name") == &Value::String("main".into())
        })
        .unwrap();
    let id = leaf.field("id").u64().to_string();
    let p = ok(&["page", s(&f), &id, "--raw"]).stdout;
    for want in [
        "type: leaf",
        "tree: data",
        "crc: ",
        "(ok)",
        "entries:",
        "\"key0",
        "of tree \"main\"",
        "00000000  02 00",
    ] {
        assert!(p.contains(want), "no {want:?} in page {id}:\n{p}");
    }
    assert!(p.contains(&format!("txid: {}", leaf.field("txid").u64())));
    // A branch: children and separators.
    let branch = rows
        .iter()
        .find(|r| r.field("type").str() == "branch")
        .unwrap();
    let p = ok(&["page", s(&f), &branch.field("id").u64().to_string()]).stdout;
    assert!(
        p.contains("children:") && p.contains("separator (none)  child "),
        "{p}"
    );
    // The metas.
    let m = ok(&["page", s(&f), &(info.field("txid").u64() % 2).to_string()]).stdout;
    assert!(
        m.contains("valid: yes") && m.contains(&format!("txid: {}", info.field("txid").u64())),
        "{m}"
    );
    assert!(m.contains("the newest commit"), "{m}");
    // Past the end of the file.
    let past = run(&["page", s(&f), "999999"]);
    assert_eq!(past.code, 1);
    assert!(past.stderr.contains("past the end"), "{}", past.stderr);
}

#[test]
fn read_only_commands_leave_the_file_byte_for_byte_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let f = sample_db(dir.path(), 1500);
    let before = std::fs::read(&f).unwrap();
    for args in READ_ONLY {
        let args = with_file(args, s(&f));
        let r = run(&args);
        assert_eq!(r.code, 0, "larch {args:?}: {}", r.stderr);
    }
    assert_eq!(ok(&["get", s(&f), "key000001"]).stdout.len(), 42);
    assert_eq!(run(&["get", s(&f), "absent"]).code, 1);
    ok(&["copy", s(&f), s(&dir.path().join("copy.larch"))]);
    assert!(!run(&["copy", s(&f), "-"]).stdout_bytes.is_empty());
    assert!(
        std::fs::read(&f).unwrap() == before,
        "a read-only command modified the file"
    );
}

/// Overwrite bytes of `file` at `offset`.
fn patch(file: &Path, offset: usize, bytes: &[u8]) {
    let mut data = std::fs::read(file).unwrap();
    data[offset..offset + bytes.len()].copy_from_slice(bytes);
    std::fs::write(file, data).unwrap();
}

/// Recompute a page's checksum, so damage reaches the parsers instead of stopping at the crc.
fn fix_crc(file: &Path, page: usize) {
    let mut data = std::fs::read(file).unwrap();
    let p = &mut data[page * PS..(page + 1) * PS];
    let crc = larch_engine::raw::run_checksum(p);
    p[4..8].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(file, data).unwrap();
}

/// Every read-only command on a damaged file: no panic (checked by `run`), exit 0 or 1, and
/// `check` exits 1 naming a problem.
fn assert_damage_handled(f: &Path, what: &str) -> Run {
    for args in READ_ONLY {
        let args = with_file(args, s(f));
        let r = run(&args);
        assert!(
            r.code == 0 || r.code == 1,
            "{what}: larch {args:?} exited {}: {}",
            r.code,
            r.stderr
        );
        if r.code == 1 && args[0] != "check" && args[0] != "pages" {
            assert!(
                r.stderr.starts_with("larch: "),
                "{what}: larch {args:?}: {}",
                r.stderr
            );
        }
    }
    let r = run(&["check", s(f)]);
    assert_eq!(
        r.code, 1,
        "{what}: check passed a damaged file:\n{}",
        r.stdout
    );
    assert_ne!(r.stdout.lines().next(), Some("ok"), "{what}");
    let j = run(&["check", s(f), "--json"]);
    assert_eq!(j.code, 1);
    assert_eq!(parse_json(&j).field("ok"), &Value::Bool(false), "{what}");
    r
}

#[test]
fn damaged_files_exit_1_without_panicking() {
    let dir = tempfile::tempdir().unwrap();
    let pristine = sample_db(dir.path(), 4000);
    let rows = pages_json(&pristine).field("pages").arr().to_vec();
    let ids = |t: &str| -> Vec<usize> {
        rows.iter()
            .filter(|r| {
                r.field("type").str() == t && r.field("tree") == &Value::String("data".into())
            })
            .map(|r| r.field("id").u64() as usize)
            .collect()
    };
    let leaves = ids("leaf");
    let mid_leaf = leaves[leaves.len() / 2];
    let branch = ids("branch")[0];
    let fresh = |name: &str| {
        let f = dir.path().join(name);
        std::fs::copy(&pristine, &f).unwrap();
        f
    };

    // Flipped bytes in a leaf page in the middle of the file: a checksum mismatch.
    let f = fresh("flip.larch");
    patch(&f, mid_leaf * PS + 2000, &[0xde, 0xad, 0xbe, 0xef]);
    let r = assert_damage_handled(&f, "flipped leaf");
    assert!(
        r.stdout.contains(&format!("page {mid_leaf}")),
        "{}",
        r.stdout
    );
    assert_eq!(
        run(&["dump", s(&f)]).code,
        1,
        "dump must not print a damaged tree as if sound"
    );
    let p = run(&["pages", s(&f)]);
    assert_eq!(p.code, 1);
    assert!(
        p.stderr.contains(&format!("page {mid_leaf}")),
        "{}",
        p.stderr
    );
    assert!(ok(&["page", s(&f), &mid_leaf.to_string()])
        .stdout
        .contains("(BAD)"));

    // A leaf claiming an impossible entry count, with a valid checksum.
    let f = fresh("count.larch");
    patch(&f, mid_leaf * PS + 2, &0xffffu16.to_le_bytes());
    fix_crc(&f, mid_leaf);
    assert_damage_handled(&f, "impossible count");

    // Cell offsets pointing anywhere, with a valid checksum.
    let f = fresh("cells.larch");
    patch(
        &f,
        mid_leaf * PS + 16,
        &[0xf0, 0x0f, 0xff, 0xff, 0x00, 0x00],
    );
    fix_crc(&f, mid_leaf);
    assert_damage_handled(&f, "bad cell offsets");

    // A branch whose children point outside the file, and back at itself (a cycle).
    let f = fresh("branch.larch");
    patch(&f, branch * PS + 16 + 2, &[0; 2]);
    let data = std::fs::read(&f).unwrap();
    let cell = |i: usize| {
        u16::from_le_bytes([
            data[branch * PS + 16 + 2 * i],
            data[branch * PS + 17 + 2 * i],
        ]) as usize
    };
    let (c0, c1) = (cell(0), cell(2));
    patch(&f, branch * PS + c0 + 2, &(1u64 << 40).to_le_bytes());
    patch(&f, branch * PS + c1 + 2, &(branch as u64).to_le_bytes());
    fix_crc(&f, branch);
    assert_damage_handled(&f, "wild child pointers");

    // Garbage over a whole page.
    let f = fresh("garbage.larch");
    let junk: Vec<u8> = (0..PS).map(|i| (i * 7 + 3) as u8).collect();
    patch(&f, branch * PS, &junk);
    assert_damage_handled(&f, "garbage branch");

    // Both metas zeroed: nothing opens, everything but `page` says so and exits 1.
    let f = fresh("nometa.larch");
    patch(&f, 0, &[0; 128]);
    patch(&f, PS, &[0; 128]);
    for args in READ_ONLY {
        let args = with_file(args, s(&f));
        let r = run(&args);
        if args[0] == "page" {
            // The viewer still decodes pages of a file that will not open.
            assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
            continue;
        }
        assert_eq!(r.code, 1, "{args:?}");
        assert!(
            r.stderr.contains("not a larch database"),
            "{args:?}: {}",
            r.stderr
        );
    }
    assert!(ok(&["page", s(&f), "0"])
        .stdout
        .contains("valid: no (meta page is all zero"));
    let j = run(&["check", s(&f), "--json"]);
    assert_eq!(parse_json(&j).field("ok"), &Value::Bool(false));
    assert_eq!(
        run(&["put", s(&f), "k", "v"]).code,
        1,
        "writes refuse it too"
    );
    assert_eq!(run_with(&["load", s(&f)], b"00\t00\n").code, 1);

    // Truncated to half: both metas now point past the end.
    let f = fresh("short.larch");
    let len = std::fs::metadata(&f).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&f)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    assert_eq!(run(&["check", s(&f)]).code, 1);
    assert_eq!(run(&["info", s(&f)]).code, 1);

    // Not a database at all.
    let f = dir.path().join("text.larch");
    std::fs::write(&f, "hello\n".repeat(2000)).unwrap();
    let r = run(&["check", s(&f)]);
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("text.larch"), "{}", r.stderr);
}

#[test]
fn a_damaged_older_meta_is_a_note_not_a_failure() {
    let dir = tempfile::tempdir().unwrap();
    let f = sample_db(dir.path(), 100);
    let txid = parse_json(&ok(&["info", s(&f), "--json"]))
        .field("txid")
        .u64();
    let older = (txid + 1) % 2;
    patch(&f, older as usize * PS + 20, &[0x55]);
    let v = parse_json(&ok(&["info", s(&f), "--json"]));
    assert_eq!(v.field("other_txid"), &Value::Null);
    assert!(v.field("meta_fallback").str().contains("damaged"), "{v:?}");
    let r = ok(&["check", s(&f)]);
    assert_eq!(r.stdout.lines().next(), Some("ok"));
    assert!(r.stdout.contains("note: meta fallback"), "{}", r.stdout);
    let m = ok(&["page", s(&f), &older.to_string()]).stdout;
    assert!(m.contains("valid: no (meta checksum mismatch"), "{m}");
}

/// A database whose values were large (overflow pages) and then overwritten with small ones:
/// nearly all of it free pages for compaction to drop, with the few live leaves scattered
/// through it. Two trees, so the round trip covers the catalog too.
fn churned_db(dir: &Path) -> PathBuf {
    let path = dir.join("churned.larch");
    let load = |value: &[u8]| {
        let input: String = (0..2000)
            .map(|i| format!("{}\t{}\n", hex(format!("key{i:06}").as_bytes()), hex(value)))
            .collect();
        let r = run_with(&["load", s(&path), "--batch", "500"], input.as_bytes());
        assert_eq!(r.code, 0, "{}", r.stderr);
    };
    load(&[b'v'; 3000]);
    load(b"1");
    ok(&["put", s(&path), "alice", "1", "--tree", "users"]);
    path
}

/// The numbers of `SRC_BYTES -> DST_BYTES bytes (gain=X.XXx)`, checking its exact shape
/// (`^\d+ -> \d+ bytes \(gain=\d+\.\d\dx\)$`) by hand.
fn parse_compact_line(out: &str) -> (u64, u64, String) {
    let line = out
        .strip_suffix('\n')
        .expect("one line ending in a newline");
    assert!(!line.contains('\n'), "more than one line: {out:?}");
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    let (before, rest) = line.split_once(" -> ").expect("` -> `");
    let (after, rest) = rest.split_once(" bytes (gain=").expect("` bytes (gain=`");
    let gain = rest.strip_suffix("x)").expect("ends with `x)`");
    let (whole, frac) = gain.split_once('.').expect("gain has a decimal point");
    assert!(
        digits(before) && digits(after) && digits(whole) && digits(frac) && frac.len() == 2,
        "bad shape: {line:?}"
    );
    (
        before.parse().unwrap(),
        after.parse().unwrap(),
        gain.to_string(),
    )
}

fn file_len(p: &Path) -> u64 {
    std::fs::metadata(p).unwrap().len()
}

#[test]
fn compact_to_a_new_file_round_trips_and_shrinks() {
    let dir = tempfile::tempdir().unwrap();
    let src = churned_db(dir.path());
    let dst = dir.path().join("compacted.larch");
    let before = std::fs::read(&src).unwrap();
    let r = ok(&["compact", s(&src), s(&dst)]);
    let (src_bytes, dst_bytes, gain) = parse_compact_line(&r.stdout);
    assert_eq!(src_bytes, before.len() as u64);
    assert_eq!(dst_bytes, file_len(&dst));
    assert!(
        dst_bytes < src_bytes,
        "compaction did not shrink: {}",
        r.stdout
    );
    assert_eq!(gain, format!("{:.2}", src_bytes as f64 / dst_bytes as f64));
    assert!(
        std::fs::read(&src).unwrap() == before,
        "compact SRC DST modified SRC"
    );
    // Same trees, same records.
    assert_eq!(ok(&["trees", s(&dst)]).stdout, "main\nusers\n");
    for tree in ["main", "users"] {
        let a = ok(&["dump", s(&src), "--tree", tree]).stdout_bytes;
        let b = ok(&["dump", s(&dst), "--tree", tree]).stdout_bytes;
        assert!(a == b, "tree {tree} differs after compaction");
    }
    assert_eq!(ok(&["get", s(&dst), "key001999"]).stdout, "1\n");
    assert_eq!(ok(&["check", s(&dst)]).stdout.lines().next(), Some("ok"));
    // No free pages in the copy.
    let info = parse_json(&ok(&["info", s(&dst), "--json"]));
    assert_eq!(info.field("dead_ratio").num(), 0.0);
    assert_eq!(info.field("file_bytes").u64(), dst_bytes);
    // The copy is an ordinary database: writable, and compactable again.
    ok(&["put", s(&dst), "bob", "2"]);
    let again = dir.path().join("again.larch");
    let (b2, a2, _) = parse_compact_line(&ok(&["compact", s(&dst), s(&again)]).stdout);
    assert_eq!((b2, a2), (file_len(&dst), file_len(&again)));
    assert_eq!(ok(&["get", s(&again), "bob"]).stdout, "2\n");
}

#[test]
fn compact_in_place_shrinks_a_churned_file() {
    let dir = tempfile::tempdir().unwrap();
    let f = churned_db(dir.path());
    let size = file_len(&f);
    let dump = ok(&["dump", s(&f)]).stdout_bytes;
    let users = ok(&["dump", s(&f), "--tree", "users"]).stdout_bytes;
    let r = ok(&["compact", "--in-place", s(&f)]);
    let (before, after, gain) = parse_compact_line(&r.stdout);
    assert_eq!(before, size);
    assert_eq!(after, file_len(&f));
    assert!(
        after < before,
        "in-place compaction did not shrink: {}",
        r.stdout
    );
    assert_eq!(gain, format!("{:.2}", before as f64 / after as f64));
    assert_eq!(ok(&["check", s(&f)]).stdout.lines().next(), Some("ok"));
    assert!(ok(&["dump", s(&f)]).stdout_bytes == dump, "records changed");
    assert!(ok(&["dump", s(&f), "--tree", "users"]).stdout_bytes == users);
    // The flag may come after the file too; a second run has little left to do.
    let r = ok(&["compact", s(&f), "--in-place"]);
    let (before2, after2, _) = parse_compact_line(&r.stdout);
    assert_eq!(before2, after);
    assert!(after2 <= before2, "{}", r.stdout);
    ok(&["check", s(&f)]);
}

#[test]
fn compact_errors_and_usage() {
    let dir = tempfile::tempdir().unwrap();
    let src = sample_db(dir.path(), 200);
    let src_before = std::fs::read(&src).unwrap();

    // DST exists: exit 1, naming it, and it is left alone (even when it is SRC itself).
    let dst = dir.path().join("taken.larch");
    std::fs::write(&dst, b"precious").unwrap();
    let r = run(&["compact", s(&src), s(&dst)]);
    assert_eq!(r.code, 1);
    assert!(
        r.stderr.starts_with("larch: ")
            && r.stderr.contains("taken.larch")
            && r.stderr.contains("already exists"),
        "{}",
        r.stderr
    );
    assert_eq!(r.stdout, "");
    assert_eq!(std::fs::read(&dst).unwrap(), b"precious");
    assert_eq!(run(&["compact", s(&src), s(&src)]).code, 1);
    assert!(std::fs::read(&src).unwrap() == src_before);

    // A missing or corrupt SRC: exit 1 naming it, and no DST appears.
    let out = dir.path().join("out.larch");
    let missing = dir.path().join("missing.larch");
    let r = run(&["compact", s(&missing), s(&out)]);
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("missing.larch"), "{}", r.stderr);
    let r = run(&["compact", "--in-place", s(&missing)]);
    assert_eq!(r.code, 1);
    assert!(!missing.exists(), "--in-place created the missing file");
    let junk = dir.path().join("junk.larch");
    std::fs::write(&junk, "hello\n".repeat(2000)).unwrap();
    for args in [
        &["compact", s(&junk), s(&out)][..],
        &["compact", "--in-place", s(&junk)],
    ] {
        let r = run(args);
        assert_eq!(r.code, 1, "{args:?}");
        assert!(r.stderr.contains("junk.larch"), "{args:?}: {}", r.stderr);
    }
    // A damaged leaf: the compaction stops instead of copying it.
    let rows = pages_json(&src).field("pages").arr().to_vec();
    let leaf = rows
        .iter()
        .find(|r| {
            r.field("type").str() == "leaf" && r.field("name") == &Value::String("main".into())
        })
        .unwrap()
        .field("id")
        .u64() as usize;
    let damaged = dir.path().join("damaged.larch");
    std::fs::copy(&src, &damaged).unwrap();
    patch(&damaged, leaf * PS + 2000, &[0xde, 0xad, 0xbe, 0xef]);
    let r = run(&["compact", s(&damaged), s(&out)]);
    assert_eq!(r.code, 1, "{}", r.stdout);
    assert!(r.stderr.starts_with("larch: "), "{}", r.stderr);
    assert!(!out.exists(), "a failed compaction left {}", out.display());
    // In place, only the pages it moves are read: exit 0 or 1, never a panic (see `run`).
    let r = run(&["compact", "--in-place", s(&damaged)]);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("compacting"))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");

    // Neither DST nor --in-place, both, or nothing at all: usage errors.
    for args in [
        &["compact", s(&src)][..],
        &["compact", s(&src), s(&out), "--in-place"],
        &["compact", "--in-place", s(&src), s(&out)],
        &["compact"],
        &["compact", "--in-place"],
        &["compact", s(&src), s(&out), "extra"],
    ] {
        let r = run(args);
        assert_eq!(r.code, 2, "larch {args:?}: {}", r.stderr);
    }
    assert!(!out.exists());
    assert!(std::fs::read(&src).unwrap() == src_before);
}

#[test]
fn bench_prints_both_phases() {
    for (write, read) in [("seq", "seq"), ("rnd", "rnd"), ("seq", "rnd")] {
        let r = ok(&[
            "bench",
            "--count",
            "2000",
            "--batch-size",
            "100",
            "--durability",
            "async",
            "--write-mode",
            write,
            "--read-mode",
            read,
        ]);
        let out = &r.stdout;
        let line = |prefix: &str| -> &str {
            out.lines()
                .find(|l| l.starts_with(prefix))
                .unwrap_or_else(|| panic!("no line starting {prefix:?} in:\n{out}"))
        };
        assert!(line("larch bench: ").contains("2000 keys of 16 bytes, 256-byte values"));
        assert!(line("  write ").starts_with(&format!(
            "  write {write}, read {read}, durability async, policy first-fit"
        )));
        let w = line("write: ");
        assert!(
            w.starts_with("write: 2000 inserts in 20 commits: ") && w.contains(" ops/s"),
            "{w}"
        );
        let rd = line("read: ");
        assert!(
            rd.starts_with("read: 2000 gets: ")
                && rd.contains(" ops/s")
                && rd.ends_with("every value verified"),
            "{rd}"
        );
        for l in [
            "  latency per commit ",
            "  latency of the commit call alone ",
            "  latency per insert ",
            "  latency per get (groups of 64 timed together) ",
        ] {
            let l = line(l);
            for p in [" p50 ", " p99 ", " p99.9 ", " max "] {
                assert!(l.contains(p), "no {p:?} in {l:?}");
            }
        }
        assert!(line("  io per commit: ").contains(" write calls, "));
        assert!(line("file: ").contains(" bytes"));
        assert!(line("pages: ").contains("dead ratio"));
        // The temporary directory is gone.
        let file = line("  file: ")
            .strip_prefix("  file: ")
            .unwrap()
            .split(" (")
            .next()
            .unwrap()
            .to_string();
        assert!(!Path::new(&file).exists(), "{file} was not removed");
    }
}

#[test]
fn bench_path_keep_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    let kept = dir.path().join("kept.larch");
    let args = |p: &Path| {
        vec![
            "bench".to_string(),
            "--count".into(),
            "1500".into(),
            "--batch-size".into(),
            "250".into(),
            "--key-size".into(),
            "10".into(),
            "--value-size".into(),
            "5000".into(),
            "--durability".into(),
            "nometasync".into(),
            "--policy".into(),
            "best-fit".into(),
            "--page-size".into(),
            "8192".into(),
            "--write-mode".into(),
            "rnd".into(),
            "--seed".into(),
            "42".into(),
            "--path".into(),
            s(p).to_string(),
        ]
    };
    let mut keep = args(&kept);
    keep.push("--keep".into());
    let keep: Vec<&str> = keep.iter().map(String::as_str).collect();
    let r = ok(&keep);
    assert!(
        r.stdout.contains("write: 1500 inserts in 6 commits"),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("kept afterwards"), "{}", r.stdout);
    // The kept file holds the keys: 10-byte big-endian counters, in the default tree.
    assert_eq!(ok(&["check", s(&kept)]).stdout.lines().next(), Some("ok"));
    let info = parse_json(&ok(&["info", s(&kept), "--json"]));
    assert_eq!(info.field("page_size").u64(), 8192);
    let stat = parse_json(&ok(&["stat", s(&kept), "--json"]));
    assert_eq!(stat.field("trees").arr()[0].field("entries").u64(), 1500);
    let v = ok(&["get", s(&kept), "000000000000000005db", "--hex"]).stdout;
    assert_eq!(v.len(), 2 * 5000 + 1);
    assert!(
        v.starts_with("db05000000000000"),
        "value starts with the counter"
    );

    // An existing path is refused, and left alone.
    let before = std::fs::read(&kept).unwrap();
    let again: Vec<String> = args(&kept);
    let again: Vec<&str> = again.iter().map(String::as_str).collect();
    let r = run(&again);
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("already exists"), "{}", r.stderr);
    assert!(std::fs::read(&kept).unwrap() == before);

    // Without --keep, a given path is removed at the end.
    let gone = dir.path().join("gone.larch");
    let a = args(&gone);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    ok(&a);
    assert!(!gone.exists());

    for bad in [
        &["bench", "--count", "0"][..],
        &["bench", "--batch-size", "0"],
        &["bench", "--key-size", "0"],
        &["bench", "--key-size", "2000"],
        &["bench", "--key-size", "1", "--count", "257"],
        &["bench", "--write-mode", "sideways"],
        &["bench", "--read-mode", "pwrite"],
        &["bench", "--durability", "sometimes"],
        &["bench", "--policy", "best-guess"],
        &["bench", "--page-size", "1000"],
        &["bench", "--count", "many"],
    ] {
        let r = run(bad);
        assert_eq!(r.code, 2, "larch {bad:?}: {}", r.stderr);
    }
    // One byte holds 256 distinct keys.
    let r = ok(&[
        "bench",
        "--key-size",
        "1",
        "--count",
        "256",
        "--durability",
        "async",
    ]);
    assert!(r.stdout.contains("read: 256 gets"), "{}", r.stdout);
}

/// The reproduction of a silently absorbed bit flip: 4,000 records loaded in batches of 400,
/// a clean close, one bit flipped in a leaf the last commit wrote. `check` must fail naming
/// the damage, not print "ok" one commit back; `--fall-back` says what it would discard.
#[test]
fn a_bit_flip_in_the_last_commit_fails_check_and_fall_back_names_what_it_discards() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("flip.larch");
    let mut input = String::new();
    for i in 0..4000u64 {
        input.push_str(&format!(
            "{}\t{}\n",
            hex(format!("key{:06}", (i * 7919) % 100_000).as_bytes()),
            hex(format!("value-{i}").as_bytes())
        ));
    }
    let r = run_with(&["load", s(&f), "--batch", "400"], input.as_bytes());
    assert_eq!(r.code, 0, "{}", r.stderr);
    let last = parse_json(&ok(&["info", s(&f), "--json"]))
        .field("txid")
        .u64();
    let rows = pages_json(&f).field("pages").arr().to_vec();
    let leaf = rows
        .iter()
        .find(|r| r.field("type").str() == "leaf" && r.field("txid").u64() == last)
        .expect("the last commit wrote a leaf")
        .field("id")
        .u64() as usize;
    let at = leaf * PS + 3000;
    let byte = std::fs::read(&f).unwrap()[at];
    patch(&f, at, &[byte ^ 0x04]);
    let r = run(&["check", s(&f)]);
    assert_eq!(r.code, 1, "check passed a flipped bit: {}", r.stdout);
    assert!(
        r.stderr.contains(&format!("page {leaf} is corrupt"))
            && r.stderr.contains(&format!("commit {last} was durable")),
        "{}",
        r.stderr
    );
    let r = run(&["check", s(&f), "--fall-back"]);
    assert_eq!(r.code, 1, "check --fall-back passed: {}", r.stdout);
    assert!(
        r.stdout.contains("newest commit discarded")
            && r.stdout.contains(&format!("opened at commit {}", last - 1)),
        "{}",
        r.stdout
    );
}

#[test]
fn info_on_a_live_database_reports_a_nometasync_commit_as_not_durable() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("nms.larch");
    let db = larch_engine::Db::open(
        &f,
        larch_engine::Options::default().durability(larch_engine::Durability::NoMetaSync),
    )
    .unwrap();
    for i in 0..5u8 {
        let tx = db.begin_write().unwrap();
        tx.open_tree("main").unwrap().insert(&[i], b"v").unwrap();
        tx.commit().unwrap();
    }
    let st = db.stats().unwrap();
    assert!(st.durable_txid < st.txid);
    let info = parse_json(&ok(&["info", s(&f), "--json"]));
    assert_eq!(info.field("txid").u64(), st.txid);
    assert_eq!(info.field("durable_txid").u64(), st.durable_txid);
    db.sync().unwrap();
    let info = parse_json(&ok(&["info", s(&f), "--json"]));
    assert_eq!(info.field("durable_txid").u64(), st.txid);
}

#[test]
fn a_database_another_process_has_open_is_read_and_written_live() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("held.larch");
    ok(&["put", s(&f), "k", "v"]);
    // This test process holds it read-write; the CLI, another process, reads and writes it
    // through the lock file, and this process sees the CLI's commit.
    let held = larch_engine::Db::open(&f, larch_engine::Options::default()).unwrap();
    assert_eq!(ok(&["get", s(&f), "k"]).stdout, "v\n");
    assert!(ok(&["info", s(&f)]).stdout.contains("txid"));
    ok(&["check", s(&f)]);
    ok(&["put", s(&f), "k", "w"]);
    let rx = held.begin_read().unwrap();
    assert_eq!(
        rx.open_tree("main").unwrap().get(b"k").unwrap(),
        Some(&b"w"[..])
    );
    drop(rx);
    let tx = held.begin_write().unwrap();
    tx.open_tree("main").unwrap().insert(b"k", b"x").unwrap();
    tx.commit().unwrap();
    assert_eq!(ok(&["get", s(&f), "k"]).stdout, "x\n");
    drop(held);
    assert_eq!(ok(&["get", s(&f), "k"]).stdout, "x\n");
}

#[test]
fn an_empty_file_is_refused_by_reads_and_becomes_a_database_on_the_first_write() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("touched.larch");
    std::fs::write(&f, b"").unwrap();
    let r = run(&["info", s(&f)]);
    assert_eq!(r.code, 1);
    assert!(
        r.stderr.contains("not a larch database") && r.stderr.contains("empty"),
        "{}",
        r.stderr
    );
    assert_eq!(
        file_len(&f),
        0,
        "a read-only command wrote to the empty file"
    );
    ok(&["put", s(&f), "k", "v"]);
    assert_eq!(ok(&["get", s(&f), "k"]).stdout, "v\n");
    ok(&["check", s(&f)]);
}

/// Keys in the live writer's tree `t`.
const LIVE_KEYS: u64 = 400;

/// The value of key `i` in the writer's state `n`: a rotation of 0..LIVE_KEYS, so every state
/// sums to the same total and the marker says exactly what every value must be.
fn live_value(i: u64, n: u64) -> Vec<u8> {
    let mut v = format!("{:08}", (i + n) % LIVE_KEYS).into_bytes();
    v.resize(120, b'.');
    v
}

fn live_key(i: u64) -> Vec<u8> {
    format!("k{i:04}").into_bytes()
}

/// State `n` of the live writer: tree `t` holds every key at `live_value(i, n)` and `marker`
/// holds `n`.
fn write_live_state(db: &larch_engine::Db, n: u64) {
    let tx = db.begin_write().unwrap();
    {
        let mut t = tx.open_tree("t").unwrap();
        for i in 0..LIVE_KEYS {
            t.insert(&live_key(i), &live_value(i, n)).unwrap();
        }
        t.insert(b"marker", n.to_string().as_bytes()).unwrap();
    }
    // Some churn in a second tree, so pages are freed and reused under the readers.
    tx.open_tree("main")
        .unwrap()
        .insert(
            format!("key{:06}", n % 500).as_bytes(),
            &vec![b'x'; (n % 300) as usize],
        )
        .unwrap();
    tx.commit().unwrap();
}

/// The marker of the state tree `t` of `db` holds, after checking that it is a whole state:
/// every value is the one that marker's state gives it (and so they sum to the invariant).
fn live_state_of(db: &larch_engine::Db) -> u64 {
    let rx = db.begin_read().unwrap();
    let t = rx.open_tree("t").unwrap();
    let n: u64 = std::str::from_utf8(t.get(b"marker").unwrap().unwrap())
        .unwrap()
        .parse()
        .unwrap();
    let mut sum = 0;
    for i in 0..LIVE_KEYS {
        let v = t.get(&live_key(i)).unwrap().unwrap();
        assert_eq!(v, &live_value(i, n)[..], "key {i} is not in state {n}");
        sum += std::str::from_utf8(&v[..8])
            .unwrap()
            .parse::<u64>()
            .unwrap();
    }
    assert_eq!(sum, LIVE_KEYS * (LIVE_KEYS - 1) / 2, "the sum invariant");
    assert_eq!(t.len().unwrap(), LIVE_KEYS + 1);
    n
}

/// A directory for the live tests: on tmpfs when there is one, where a sync costs nothing, so
/// the writer commits thousands of times a second under the commands it races.
fn live_dir() -> tempfile::TempDir {
    tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap())
}

/// This test process holds `path` read-write and commits states 0, 1, 2, ... (each a Sync
/// commit, published to other processes at once) in a background thread until stopped;
/// [`LiveWriter::stop`] returns every (txid, state) it committed.
struct LiveWriter {
    db: std::sync::Arc<larch_engine::Db>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<Vec<(u64, u64)>>>,
}

impl LiveWriter {
    fn start(path: &Path) -> LiveWriter {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        let db = Arc::new(larch_engine::Db::open(path, larch_engine::Options::default()).unwrap());
        let stop = Arc::new(AtomicBool::new(false));
        let (db2, stop2) = (db.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut states = Vec::new();
            let mut n = 0;
            while n == 0 || !stop2.load(Ordering::Relaxed) {
                write_live_state(&db2, n);
                // The only writer: the newest commit is the one just made.
                states.push((db2.begin_read().unwrap().txid(), n));
                n += 1;
            }
            states
        });
        let w = LiveWriter {
            db,
            stop,
            thread: Some(thread),
        };
        // State 0 is in before any command runs.
        while w.db.begin_read().unwrap().open_tree("t").is_err() {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        w
    }

    /// Wait until it has committed `n` more times.
    fn wait_commits(&self, n: u64) {
        let newest = || self.db.begin_read().unwrap().txid();
        let start = newest();
        while newest() < start + n {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    fn stop(mut self) -> (std::sync::Arc<larch_engine::Db>, Vec<(u64, u64)>) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let states = self.thread.take().unwrap().join().unwrap();
        (self.db.clone(), states)
    }
}

impl Drop for LiveWriter {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[test]
fn read_only_commands_work_on_a_live_database_under_write_load() {
    let dir = live_dir();
    // Large enough that a page walk takes many of the writer's commits: a walk that did not
    // hold its snapshot tripped over reused pages in about one run in twelve.
    let f = sample_db(dir.path(), 20000);
    let w = LiveWriter::start(&f);
    for round in 0..3 {
        for args in READ_ONLY.iter().copied().chain([
            &["get", "F", "marker", "--tree", "t"][..],
            &["dump", "F", "--tree", "t"],
            &["stat", "F", "--tree", "t"],
        ]) {
            let args = with_file(args, s(&f));
            w.wait_commits(1);
            let r = run(&args);
            assert_eq!(
                r.code, 0,
                "round {round}: larch {args:?}: {}{}",
                r.stdout, r.stderr
            );
        }
        // A dump is one snapshot: a whole state.
        let dump = ok(&["dump", s(&f), "--tree", "t"]).stdout;
        assert_eq!(dump.lines().count() as u64, LIVE_KEYS + 1);
        // The page walk of a snapshot finds nothing wrong however fast the writer goes.
        let mut leaves = Vec::new();
        for _ in 0..20 {
            let v = pages_json(&f);
            assert!(v.field("problems").arr().is_empty(), "{v:?}");
            leaves.extend(
                v.field("pages")
                    .arr()
                    .iter()
                    .filter(|r| r.field("name") == &Value::String("t".into()))
                    .map(|r| r.field("id").u64()),
            );
        }
        // A page of tree t in one snapshot may be free, rewritten or (the file's free tail
        // given back) past the end of the file in the next; whenever `page` finds it reachable
        // in its own snapshot, it reads that commit's bytes.
        for id in leaves.iter().step_by(7).take(20) {
            let r = run(&["page", s(&f), &id.to_string()]);
            let gone = ["past the end of the file", "read failed"];
            if r.code == 1 && gone.iter().any(|g| r.stderr.contains(g)) {
                continue;
            }
            assert_eq!(r.code, 0, "page {id}: {}", r.stderr);
            let p = r.stdout;
            if p.contains("status: reachable") {
                assert!(p.contains("(ok)") && !p.contains("BAD"), "{p}");
            }
        }
    }
    let (db, states) = w.stop();
    assert!(states.len() > 3, "the writer committed only {states:?}");
    db.check().unwrap();
}

/// The txid a `copied txid N: ...` line names (as a range of one, for the checks below).
fn copied_range(line: &str) -> (u64, u64) {
    let rest = line
        .strip_prefix("copied txid ")
        .unwrap_or_else(|| panic!("not a copy line: {line:?}"));
    let id: u64 = rest
        .split_once(": ")
        .unwrap_or_else(|| panic!("not a copy line: {line:?}"))
        .0
        .parse()
        .unwrap_or_else(|e| panic!("{line:?}: {e}"));
    (id, id)
}

/// `copy` of a database a writer commits to all along: every copy opens, passes `larch check`
/// and is exactly the state of the commit it names.
#[test]
fn copy_of_a_live_database_under_write_load_is_one_committed_snapshot() {
    let dir = live_dir();
    let f = sample_db(dir.path(), 1500);
    let w = LiveWriter::start(&f);
    // (copy file, the txids its line names)
    let mut copies = Vec::new();
    for i in 0..4 {
        w.wait_commits(2);
        let dst = dir.path().join(format!("copy{i}.larch"));
        let r = ok(&["copy", s(&f), s(&dst)]);
        assert!(r.stdout.ends_with(" bytes\n"), "{}", r.stdout);
        let range = copied_range(r.stdout.trim_end());
        let bytes: u64 = r
            .stdout
            .trim_end()
            .rsplit(' ')
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(bytes, file_len(&dst));
        copies.push((dst, range));
    }
    for i in 0..2 {
        w.wait_commits(2);
        // To stdout: the data alone there, the line on stderr.
        let r = run(&["copy", s(&f), "-"]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        assert!(!r.stdout_bytes.is_empty() && r.stdout_bytes.len() % PS == 0);
        let range = copied_range(r.stderr.trim_end());
        let dst = dir.path().join(format!("stdout{i}.larch"));
        std::fs::write(&dst, &r.stdout_bytes).unwrap();
        copies.push((dst, range));
    }
    // DST must not exist, and the writer's file is not touched by a refused copy.
    let r = run(&["copy", s(&f), s(&copies[0].0)]);
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("already exists"), "{}", r.stderr);
    let (held, states) = w.stop();
    let txid_of: std::collections::BTreeMap<u64, u64> =
        states.iter().map(|&(txid, n)| (n, txid)).collect();
    for (dst, (from, to)) in &copies {
        let c = ok(&["check", s(dst)]).stdout;
        assert!(c.starts_with("ok\n"), "{c}");
        let db =
            larch_engine::Db::open(dst, larch_engine::Options::default().read_only(true)).unwrap();
        let n = live_state_of(&db);
        let txid = txid_of
            .get(&n)
            .unwrap_or_else(|| panic!("{}: state {n} was never committed", dst.display()));
        assert!(
            (from..=to).contains(&txid),
            "{}: state {n} is txid {txid}, outside {from}..={to}",
            dst.display()
        );
        // Compacted: every page below the mark is live.
        let info = parse_json(&ok(&["info", s(dst), "--json"]));
        assert_eq!(info.field("dead_pages").u64(), 0);
        assert_eq!(info.field("txid").u64(), 1);
        // The rest of the database came along too.
        assert_eq!(
            ok(&["get", s(dst), "alice", "--tree", "users"]).stdout,
            "1\n"
        );
    }
    drop(held);
    // With nothing committed during the copy, the line names the one txid.
    let dst = dir.path().join("still.larch");
    let newest = parse_json(&ok(&["info", s(&f), "--json"]))
        .field("txid")
        .u64();
    let r = ok(&["copy", s(&f), s(&dst)]);
    assert_eq!(
        r.stdout,
        format!("copied txid {newest}: {} bytes\n", file_len(&dst))
    );
}

#[test]
fn copy_errors_and_usage() {
    let dir = tempfile::tempdir().unwrap();
    let f = sample_db(dir.path(), 10);
    let missing = dir.path().join("missing.larch");
    let dst = dir.path().join("dst.larch");
    let r = run(&["copy", s(&missing), s(&dst)]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(!dst.exists() && !missing.exists());
    assert_eq!(run(&["copy", s(&f)]).code, 2);
    assert_eq!(run(&["copy", s(&f), s(&dst), "extra"]).code, 2);
    // No temporary file is left beside DST.
    ok(&["copy", s(&f), s(&dst)]);
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["dst.larch", "sample.larch", "sample.larch-lock"]);
}

/// Slots `larch readers --json` lists for processes other than itself.
fn reader_slots(f: &Path, extra: &[&str]) -> Value {
    let mut args = vec!["readers", s(f), "--json"];
    args.extend_from_slice(extra);
    parse_json(&ok(&args))
}

#[test]
fn readers_lists_a_snapshot_this_process_holds() {
    let dir = tempfile::tempdir().unwrap();
    let f = sample_db(dir.path(), 100);
    let db = larch_engine::Db::open(&f, larch_engine::Options::default()).unwrap();
    let rx = db.begin_read().unwrap();
    // Three commits later the snapshot is three behind.
    for i in 0..3 {
        let tx = db.begin_write().unwrap();
        tx.open_tree("main").unwrap().insert(b"k", &[i]).unwrap();
        tx.commit().unwrap();
    }
    let me = u64::from(std::process::id());
    let v = reader_slots(&f, &[]);
    assert_eq!(v.field("cleared"), &Value::Null);
    let slots = v.field("readers").arr();
    let mine: Vec<&Value> = slots
        .iter()
        .filter(|r| r.field("pid").u64() == me && r.field("txid") != &Value::Null)
        .collect();
    assert_eq!(mine.len(), 1, "{v:?}");
    assert_eq!(mine[0].field("txid").u64(), rx.txid());
    assert_eq!(mine[0].field("age").u64(), 3);
    assert_eq!(mine[0].field("alive"), &Value::Bool(true));
    // The table says the same.
    let table = ok(&["readers", s(&f)]).stdout;
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["slot", "pid", "txid", "age", "alive"]);
    assert!(
        table.lines().skip(1).any(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            w[1] == me.to_string() && w[2] == rx.txid().to_string() && w[3] == "3" && w[4] == "yes"
        }),
        "{table}"
    );
    // Nothing is stale: --clear-stale clears nothing and the slot stays.
    let v = reader_slots(&f, &["--clear-stale"]);
    assert_eq!(v.field("cleared").u64(), 0);
    assert!(v
        .field("readers")
        .arr()
        .iter()
        .any(|r| r.field("pid").u64() == me));
    assert!(ok(&["readers", s(&f), "--clear-stale"])
        .stdout
        .starts_with("cleared 0 stale reader slot(s)\n"));
    // Once the snapshot ends, no slot of this process holds one.
    drop(rx);
    let v = reader_slots(&f, &[]);
    assert!(
        v.field("readers")
            .arr()
            .iter()
            .all(|r| r.field("pid").u64() != me || r.field("txid") == &Value::Null),
        "{v:?}"
    );
    // Not a database, or no file at all: exit 1, and no lock file made beside it.
    let txt = dir.path().join("notes.txt");
    std::fs::write(&txt, b"hello").unwrap();
    assert_eq!(run(&["readers", s(&txt)]).code, 1);
    assert_eq!(run(&["readers", s(&dir.path().join("none.larch"))]).code, 1);
    assert!(!dir.path().join("notes.txt-lock").exists());
    assert!(!dir.path().join("none.larch-lock").exists());
}

/// The child role of `readers_clear_stale_frees_the_slot_of_a_killed_reader`: does nothing
/// unless `LARCH_CLI_CHILD_DB` names a database; then opens it read-only, holds a snapshot,
/// prints `held <txid>` and waits to be killed.
#[test]
#[ignore]
fn child_holding_a_snapshot() {
    let Some(path) = std::env::var_os("LARCH_CLI_CHILD_DB") else {
        return;
    };
    let db =
        larch_engine::Db::open(&path, larch_engine::Options::default().read_only(true)).unwrap();
    let rx = db.begin_read().unwrap();
    println!("held {}", rx.txid());
    std::io::stdout().flush().unwrap();
    // Until the parent kills it (or closes stdin).
    let mut sink = String::new();
    let _ = std::io::stdin().read_line(&mut sink);
    drop(rx);
}

#[test]
fn readers_clear_stale_frees_the_slot_of_a_killed_reader() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let f = sample_db(dir.path(), 100);
    // This process stays attached, so the lock file keeps the dead child's slot (the first
    // process to attach to a lock file nobody holds clears every slot).
    let db = larch_engine::Db::open(&f, larch_engine::Options::default()).unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_holding_a_snapshot",
            "--nocapture",
            "--include-ignored",
        ])
        .env("LARCH_CLI_CHILD_DB", &f)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let pid = u64::from(child.id());
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let txid: u64 = loop {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "the child exited");
        if let Some(t) = line.trim().strip_prefix("held ") {
            break t.parse().unwrap();
        }
    };
    let of_child = |v: &Value| -> Vec<Value> {
        v.field("readers")
            .arr()
            .iter()
            .filter(|r| r.field("pid").u64() == pid)
            .cloned()
            .collect()
    };
    let live = of_child(&reader_slots(&f, &[]));
    assert_eq!(live.len(), 1, "{live:?}");
    assert_eq!(live[0].field("txid").u64(), txid);
    assert_eq!(live[0].field("alive"), &Value::Bool(true));
    // SIGKILL: the slot stays, marked dead, until cleared.
    child.kill().unwrap();
    child.wait().unwrap();
    let dead = of_child(&reader_slots(&f, &[]));
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0].field("alive"), &Value::Bool(false));
    assert!(ok(&["readers", s(&f)]).stdout.contains("no (stale)"));
    let v = reader_slots(&f, &["--clear-stale"]);
    assert_eq!(v.field("cleared").u64(), 1);
    assert!(of_child(&v).is_empty(), "{v:?}");
    assert!(ok(&["readers", s(&f), "--clear-stale"])
        .stdout
        .starts_with("cleared 0 stale reader slot(s)\n"));
    drop(db);
}

#[test]
fn check_and_page_say_when_the_free_map_is_behind_its_commit() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("behind.larch");
    let mut input = String::new();
    for i in 0..300 {
        input.push_str(&format!(
            "{}\t{}\n",
            hex(format!("k{i:04}").as_bytes()),
            hex(b"v")
        ));
    }
    // An in-place compaction's commits save the free map.
    let r = run_with(&["load", s(&f), "--batch", "50"], input.as_bytes());
    assert_eq!(r.code, 0, "{}", r.stderr);
    ok(&["compact", "--in-place", s(&f)]);
    let c = ok(&["check", s(&f)]);
    assert!(c.stdout.contains("marked free"), "{}", c.stdout);
    // Async commits, made durable at close: the newest meta's free map is behind.
    let r = run_with(
        &["load", s(&f), "--batch", "50", "--durability", "async"],
        input.as_bytes(),
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let c = ok(&["check", s(&f)]);
    assert!(
        c.stdout
            .contains("found by the walk: the free map is behind"),
        "{}",
        c.stdout
    );
    let info = ok(&["info", s(&f), "--json"]);
    let txid = parse_json(&info).field("txid").as_u64().unwrap();
    let slot = (txid % 2).to_string();
    let p = ok(&["page", s(&f), &slot]);
    assert!(p.stdout.contains("freemap_behind: yes"), "{}", p.stdout);
}

/// Async commits leave the free map behind its meta (docs/format.md, "A free map behind its
/// meta"), and `load --durability async` closes with such a meta: the map's bits then record
/// an earlier commit, and the pages this one leaves are found by the walk, as open and
/// `check` find them. `pages` must not call that file damaged.
#[test]
fn pages_of_a_file_whose_free_map_is_behind_finds_the_free_pages_by_the_walk() {
    let dir = tempfile::tempdir().unwrap();
    let f = sample_db(dir.path(), 3000);
    let mut input = String::new();
    for i in 0..3000 {
        input.push_str(&format!(
            "{}\t{}\n",
            hex(format!("key{i:06}").as_bytes()),
            hex(&vec![b'w'; 50 + i % 70])
        ));
    }
    let r = run_with(
        &["load", s(&f), "--batch", "200", "--durability", "async"],
        input.as_bytes(),
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let slot = |i: usize| ok(&["page", s(&f), &i.to_string()]).stdout;
    assert!(
        (0..2).any(|i| {
            let p = slot(i);
            p.contains("the newest commit") && p.contains("freemap_behind: yes")
        }),
        "{}{}",
        slot(0),
        slot(1)
    );
    ok(&["check", s(&f)]);
    let info = parse_json(&ok(&["info", s(&f), "--json"]));
    let v = pages_json(&f);
    assert!(
        v.field("problems").arr().is_empty(),
        "{:?}",
        v.field("problems")
    );
    let rows = v.field("pages").arr();
    let free = rows
        .iter()
        .filter(|r| r.field("type").str() == "free")
        .count() as u64;
    assert_eq!(
        free,
        info.field("high_water").u64() - info.field("live_pages").u64(),
        "free pages = dead pages"
    );
    let freed = rows
        .iter()
        .position(|r| r.field("type").str() == "free")
        .unwrap();
    assert!(ok(&["page", s(&f), &freed.to_string()])
        .stdout
        .contains("free in txid"));
}
