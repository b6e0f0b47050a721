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
}

/// A step: its kind and whether it runs on 1 or n threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Step {
    /// What it does.
    pub kind: Kind,
    /// The .n variant (n threads) rather than .1.
    pub many: bool,
}

/// Every step, in the order they run.
pub const ALL: [Step; 13] = [
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
];

/// Entries a range read returns.
pub const RANGE_LEN: usize = 20;

impl Step {
    /// A step.
    pub const fn new(kind: Kind, many: bool) -> Step {
        Step { kind, many }
    }

    /// `load`, `ows.1`, `ows.n`, ...
    pub fn name(self) -> &'static str {
        let names = [
            "load", "ows.1", "ows.n", "pqw.1", "pqw.n", "rqw.1", "rqw.n", "pq.1", "pq.n", "rq.1",
            "rq.n", "owa.1", "owa.n",
        ];
        names[self.index()]
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
        if self.kind == Kind::Load || !self.many {
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
            Kind::Pq | Kind::Rq => None,
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

    /// Whether the reads are ranges.
    pub fn ranges(self) -> bool {
        matches!(self.kind, Kind::Rqw | Kind::Rq)
    }
}

/// Parse a comma-separated list of step names, kept in the run order of [`ALL`].
pub fn parse_list(s: &str) -> Result<Vec<Step>, String> {
    let mut want = Vec::new();
    for name in s.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let step = Step::from_name(name).ok_or_else(|| {
            format!(
                "unknown step {name:?}; steps are {}",
                ALL.map(|s| s.name()).join(",")
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
            names.join(","),
            "load,ows.1,ows.n,pqw.1,pqw.n,rqw.1,rqw.n,pq.1,pq.n,rq.1,rq.n,owa.1,owa.n"
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
    }
}
