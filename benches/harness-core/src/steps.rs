//! The steps of the pattern, in the order they run.

use crate::engine::Durability;

/// What a step does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Insert every document, in batches, async, then one sync (counted).
    Load,
    /// Overwrite random existing keys, one key per commit, sync.
    Ows,
    /// Point reads, plus one writer limited to 1,000 async writes/s.
    Pqw,
    /// Range reads of ~20 entries, plus the limited writer.
    Rqw,
    /// Point reads only.
    Pq,
    /// Range reads only.
    Rq,
    /// Overwrite random existing keys, one key per commit, async.
    Owa,
    /// Insert benchmark: rows in id order, no secondary index (`ib.l.i0`).
    IbLoad,
    /// Insert benchmark: build the 3 secondary indexes from the rows (`ib.l.x`).
    IbIndex,
    /// Insert benchmark: insert rows maintaining the indexes, deleting the oldest as many
    /// (`ib.l.i1`, once per `--ib-threads` concurrency).
    IbInsert,
    /// Insert benchmark: index range scans + row reads beside a 100 rows/s writer (`ib.qr100`).
    IbQr,
    /// Insert benchmark: primary-key point reads beside a 100 rows/s writer (`ib.qp100`).
    IbQp,
    /// redb's write shapes: `--rb-load` new random keys in one durable transaction
    /// (`rb.load`).
    RbLoad,
    /// redb's write shapes: `--rb-ins1` new random keys, one durable commit each (`rb.ins1`).
    RbIns1,
    /// redb's write shapes: `--rb-batches` durable commits of `--rb-batch` new random keys
    /// (`rb.insb`).
    RbInsBatch,
    /// redb's write shapes: `--rb-insa` new random keys, one non-durable commit each
    /// (`rb.insa`).
    RbInsAsync,
    /// redb's write shapes: `--rb-sorted` ascending keys past every key in the table, in one
    /// durable transaction through the engine's append path (`rb.sorted`).
    RbSorted,
}

/// The child process (and database) a step runs in: each family has its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    /// The ForestDB pattern (load .. owa.n).
    ForestDb,
    /// The insert benchmark (`ib.*`).
    Ib,
    /// redb's write shapes (`rb.*`).
    Rb,
}

impl Family {
    /// Every family, in the order their children run.
    pub const ALL: [Family; 3] = [Family::ForestDb, Family::Ib, Family::Rb];

    /// The suffix of the family's database directory and rows file.
    pub fn suffix(self) -> &'static str {
        match self {
            Family::ForestDb => "",
            Family::Ib => "-ib",
            Family::Rb => "-rb",
        }
    }

    /// What the parent prints after the engine's label when the family's child starts.
    pub fn title(self) -> &'static str {
        match self {
            Family::ForestDb => "",
            Family::Ib => " (insert benchmark)",
            Family::Rb => " (redb's write shapes)",
        }
    }

    /// The family of a child that runs `steps` (the ForestDB pattern when they are mixed or
    /// none: the runner gives each child the steps of one family).
    pub fn of(steps: &[Step]) -> Family {
        match steps.first() {
            Some(s) if steps.iter().all(|t| t.family() == s.family()) => s.family(),
            _ => Family::ForestDb,
        }
    }
}

/// The most writer threads `--ib-threads` may ask for (each count has its own step name).
pub const MAX_IB_THREADS: usize = 8;

/// A step: its kind and whether it runs on 1 or n threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Step {
    /// What it does.
    pub kind: Kind,
    /// The .n variant (n threads) rather than .1.
    pub many: bool,
    /// `ib.l.i1`'s writer threads (1..=[`MAX_IB_THREADS`]); 0 for every other step.
    pub ib_threads: u8,
}

/// Every step, in the order they run: the ForestDB pattern, then the insert benchmark
/// (`ib.l.i1` once per writer count; `--ib-threads` picks which run), then redb's write
/// shapes.
pub const ALL: [Step; 13 + 4 + MAX_IB_THREADS + RB] = [
    Step::new(Kind::Load, false),
    Step::new(Kind::Ows, false),
    Step::new(Kind::Ows, true),
    Step::new(Kind::Pqw, false),
    Step::new(Kind::Pqw, true),
    Step::new(Kind::Rqw, false),
    Step::new(Kind::Rqw, true),
    Step::new(Kind::Pq, false),
    Step::new(Kind::Pq, true),
    Step::new(Kind::Rq, false),
    Step::new(Kind::Rq, true),
    Step::new(Kind::Owa, false),
    Step::new(Kind::Owa, true),
    Step::new(Kind::IbLoad, false),
    Step::new(Kind::IbIndex, false),
    Step::ib_insert(1),
    Step::ib_insert(2),
    Step::ib_insert(3),
    Step::ib_insert(4),
    Step::ib_insert(5),
    Step::ib_insert(6),
    Step::ib_insert(7),
    Step::ib_insert(8),
    Step::new(Kind::IbQr, false),
    Step::new(Kind::IbQp, false),
    Step::new(Kind::RbLoad, false),
    Step::new(Kind::RbIns1, false),
    Step::new(Kind::RbInsBatch, false),
    Step::new(Kind::RbInsAsync, false),
    Step::new(Kind::RbSorted, false),
];

/// The number of redb write-shape steps (the last of [`ALL`]).
pub const RB: usize = 5;

/// The steps of the ForestDB pattern (the default of `--steps` before the insert benchmark).
pub const FORESTDB: usize = 13;

/// Entries a range read returns.
pub const RANGE_LEN: usize = 20;

impl Step {
    /// A step.
    pub const fn new(kind: Kind, many: bool) -> Step {
        Step {
            kind,
            many,
            ib_threads: 0,
        }
    }

    /// `ib.l.i1` with `n` writer threads.
    pub const fn ib_insert(n: u8) -> Step {
        Step {
            kind: Kind::IbInsert,
            many: n > 1,
            ib_threads: n,
        }
    }

    /// `load`, `ows.1`, `ows.n`, ..., `ib.l.i0`, `ib.l.x`, `ib.l.i1` (1 writer),
    /// `ib.l.i1.t2` (2 writers), ..., `ib.qr100`, `ib.qp100`, `rb.load`, ..., `rb.sorted`.
    pub fn name(self) -> &'static str {
        let names = [
            "load",
            "ows.1",
            "ows.n",
            "pqw.1",
            "pqw.n",
            "rqw.1",
            "rqw.n",
            "pq.1",
            "pq.n",
            "rq.1",
            "rq.n",
            "owa.1",
            "owa.n",
            "ib.l.i0",
            "ib.l.x",
            "ib.l.i1",
            "ib.l.i1.t2",
            "ib.l.i1.t3",
            "ib.l.i1.t4",
            "ib.l.i1.t5",
            "ib.l.i1.t6",
            "ib.l.i1.t7",
            "ib.l.i1.t8",
            "ib.qr100",
            "ib.qp100",
            "rb.load",
            "rb.ins1",
            "rb.insb",
            "rb.insa",
            "rb.sorted",
        ];
        names[self.index()]
    }

    /// Whether the step is one of the insert benchmark's (its own tables, its own child).
    pub fn is_ib(self) -> bool {
        matches!(
            self.kind,
            Kind::IbLoad | Kind::IbIndex | Kind::IbInsert | Kind::IbQr | Kind::IbQp
        )
    }

    /// Whether the step is one of redb's write shapes (its own child and database).
    pub fn is_rb(self) -> bool {
        matches!(
            self.kind,
            Kind::RbLoad | Kind::RbIns1 | Kind::RbInsBatch | Kind::RbInsAsync | Kind::RbSorted
        )
    }

    /// The child (and database) the step runs in.
    pub fn family(self) -> Family {
        if self.is_ib() {
            Family::Ib
        } else if self.is_rb() {
            Family::Rb
        } else {
            Family::ForestDb
        }
    }

    /// Position in [`ALL`] (also the step's part of every thread seed).
    pub fn index(self) -> usize {
        ALL.iter().position(|s| *s == self).unwrap_or(0)
    }

    /// Inverse of [`Step::name`].
    pub fn from_name(s: &str) -> Option<Step> {
        ALL.into_iter().find(|st| st.name() == s)
    }

    /// Threads of the main activity (readers or writers), given the n of `--threads`.
    pub fn threads(self, n: usize) -> usize {
        if self.kind == Kind::IbInsert {
            usize::from(self.ib_threads)
        } else if self.kind == Kind::Load || !self.many {
            1
        } else {
            n
        }
    }

    /// The durability of the step's commits, if it writes.
    pub fn durability(self) -> Option<Durability> {
        match self.kind {
            Kind::Ows => Some(Durability::Sync),
            Kind::Load | Kind::Pqw | Kind::Rqw | Kind::Owa => Some(Durability::Async),
            // redb's benchmark commits with its connection's default (durable) except the
            // nosync phase.
            Kind::RbLoad | Kind::RbIns1 | Kind::RbInsBatch | Kind::RbSorted => {
                Some(Durability::Sync)
            }
            Kind::RbInsAsync => Some(Durability::Async),
            Kind::Pq | Kind::Rq => None,
            // `--ib-durability` (async by default) decides; the runner sets it.
            Kind::IbLoad | Kind::IbIndex | Kind::IbInsert | Kind::IbQr | Kind::IbQp => None,
        }
    }

    /// Whether a rate-limited writer runs beside the readers.
    pub fn limited_writer(self) -> bool {
        matches!(self.kind, Kind::Pqw | Kind::Rqw)
    }

    /// Whether the main activity reads (the rest write).
    pub fn reads(self) -> bool {
        matches!(self.kind, Kind::Pqw | Kind::Rqw | Kind::Pq | Kind::Rq)
    }

    /// Whether `--readers processes` runs the step's readers as processes: `pq.n` and `rq.n`
    /// (reads only, n readers; the steps with a writer keep their readers in the engine's
    /// process).
    pub fn reader_processes_apply(self) -> bool {
        matches!(self.kind, Kind::Pq | Kind::Rq) && self.many
    }

    /// Whether the reads are ranges.
    pub fn ranges(self) -> bool {
        matches!(self.kind, Kind::Rqw | Kind::Rq)
    }
}

/// The step names `--steps` accepts: every step, `ib.l.i1` standing for the `ib.l.i1*`
/// of every `--ib-threads` count.
pub fn listed_names() -> Vec<&'static str> {
    ALL.iter()
        .filter(|s| s.kind != Kind::IbInsert || s.ib_threads == 1)
        .map(|s| s.name())
        .collect()
}

/// The default `--steps`: every step (`ib.l.i1` at each `ib_threads` count).
pub fn default_list(ib_threads: &[usize]) -> Vec<Step> {
    with_ib_threads(
        listed_names().iter().filter_map(|n| Step::from_name(n)),
        ib_threads,
    )
}

/// `steps` with `ib.l.i1` replaced by one step per writer count, in run order.
pub fn with_ib_threads(steps: impl IntoIterator<Item = Step>, ib_threads: &[usize]) -> Vec<Step> {
    let mut want: Vec<Step> = Vec::new();
    for s in steps {
        if s.kind == Kind::IbInsert {
            want.extend(ib_threads.iter().map(|&n| Step::ib_insert(n as u8)));
        } else {
            want.push(s);
        }
    }
    ALL.into_iter().filter(|s| want.contains(s)).collect()
}

/// Parse a comma-separated list of step names, kept in the run order of [`ALL`] (`ib.l.i1`
/// stands for the one-writer step; [`with_ib_threads`] widens it).
pub fn parse_list(s: &str) -> Result<Vec<Step>, String> {
    let mut want = Vec::new();
    for name in s.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let step = Step::from_name(name).ok_or_else(|| {
            format!(
                "unknown step {name:?}; steps are {}",
                listed_names().join(",")
            )
        })?;
        want.push(step);
    }
    if want.is_empty() {
        return Err("--steps names no step".into());
    }
    Ok(ALL.into_iter().filter(|s| want.contains(s)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_in_order() {
        let names: Vec<&str> = ALL.iter().map(|s| s.name()).collect();
        assert_eq!(
            names[..FORESTDB].join(","),
            "load,ows.1,ows.n,pqw.1,pqw.n,rqw.1,rqw.n,pq.1,pq.n,rq.1,rq.n,owa.1,owa.n"
        );
        assert_eq!(
            listed_names()[FORESTDB..].join(","),
            "ib.l.i0,ib.l.x,ib.l.i1,ib.qr100,ib.qp100,rb.load,rb.ins1,rb.insb,rb.insa,rb.sorted"
        );
        assert_eq!(
            names[names.len() - RB..].join(","),
            "rb.load,rb.ins1,rb.insb,rb.insa,rb.sorted"
        );
        for (i, s) in ALL.iter().enumerate() {
            assert_eq!(Step::from_name(s.name()), Some(*s));
            assert_eq!(s.index(), i);
        }
    }

    #[test]
    fn parses_lists_in_run_order() {
        let steps = parse_list("pq.1, load,ows.n").unwrap();
        let names: Vec<&str> = steps.iter().map(|s| s.name()).collect();
        assert_eq!(names, vec!["load", "ows.n", "pq.1"]);
        assert!(parse_list("load,nope").is_err());
        assert!(parse_list("").is_err());
    }

    #[test]
    fn semantics() {
        let s = |n| Step::from_name(n).unwrap();
        assert_eq!(s("ows.1").durability(), Some(Durability::Sync));
        assert_eq!(s("owa.n").durability(), Some(Durability::Async));
        assert_eq!(s("pqw.1").durability(), Some(Durability::Async));
        assert_eq!(s("pq.n").durability(), None);
        assert_eq!(s("pq.n").threads(4), 4);
        assert_eq!(s("pq.1").threads(4), 1);
        assert_eq!(s("load").threads(4), 1);
        assert!(s("rqw.n").limited_writer() && s("rqw.n").ranges() && s("rqw.n").reads());
        assert!(!s("owa.1").reads());
        assert!(s("ib.l.i1.t4").is_ib() && !s("owa.1").is_ib());
        assert_eq!(s("ib.l.i1.t4").threads(2), 4);
        assert_eq!(s("ib.l.i1").threads(2), 1);
        let procs: Vec<&str> = ALL
            .iter()
            .filter(|s| s.reader_processes_apply())
            .map(|s| s.name())
            .collect();
        assert_eq!(procs, vec!["pq.n", "rq.n"]);
    }

    #[test]
    fn ib_threads_widen_the_insert_step() {
        let steps = with_ib_threads(parse_list("ib.qp100,ib.l.i1").unwrap(), &[1, 2, 4]);
        let names: Vec<&str> = steps.iter().map(|s| s.name()).collect();
        assert_eq!(
            names,
            vec!["ib.l.i1", "ib.l.i1.t2", "ib.l.i1.t4", "ib.qp100"]
        );
        assert_eq!(default_list(&[2]).len(), FORESTDB + 5 + RB);
    }

    #[test]
    fn redb_shapes_are_a_family_of_their_own() {
        let s = |n| Step::from_name(n).unwrap();
        let rb: Vec<Step> = ALL.iter().copied().filter(|s| s.is_rb()).collect();
        assert_eq!(rb.len(), RB);
        for st in &rb {
            assert_eq!(st.family(), Family::Rb);
            assert!(!st.is_ib() && !st.reads() && !st.limited_writer());
            assert_eq!(st.threads(4), 1);
        }
        assert_eq!(s("rb.load").durability(), Some(Durability::Sync));
        assert_eq!(s("rb.ins1").durability(), Some(Durability::Sync));
        assert_eq!(s("rb.insb").durability(), Some(Durability::Sync));
        assert_eq!(s("rb.insa").durability(), Some(Durability::Async));
        assert_eq!(s("rb.sorted").durability(), Some(Durability::Sync));
        assert_eq!(s("owa.1").family(), Family::ForestDb);
        assert_eq!(s("ib.l.x").family(), Family::Ib);
        // Selected on their own, in run order, beside the other families.
        let steps = parse_list("rb.sorted,pq.1,rb.load,ib.l.i0").unwrap();
        let names: Vec<&str> = steps.iter().map(|s| s.name()).collect();
        assert_eq!(names, vec!["pq.1", "ib.l.i0", "rb.load", "rb.sorted"]);
        assert_eq!(Family::of(&steps[2..]), Family::Rb);
        assert_eq!(Family::of(&steps[1..2]), Family::Ib);
        assert_eq!(Family::of(&steps), Family::ForestDb);
        assert_eq!(Family::of(&[]), Family::ForestDb);
        let suffixes: Vec<&str> = Family::ALL.iter().map(|f| f.suffix()).collect();
        assert_eq!(suffixes, vec!["", "-ib", "-rb"]);
    }
}
