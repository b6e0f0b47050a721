//! Naming and constructing the available policies.

use crate::{AppendPreferringPolicy, BestFitPolicy, FirstFitPolicy, FreeSpacePolicy, NullPolicy};

/// Which policy; selectable per open.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PolicyKind {
    /// Never reuse a page; the baseline every other policy is measured against.
    Null,
    /// Reuse the lowest-addressed run that fits.
    FirstFit,
    /// Reuse the shortest run that fits (ties: the lowest address).
    BestFit,
    /// Reuse only runs of at least 8 pages, filling each from its start; otherwise append.
    AppendPreferring,
}

impl PolicyKind {
    /// Every policy, so tools and tests can compare them all without listing them by hand.
    pub const ALL: [PolicyKind; 4] = [
        PolicyKind::Null,
        PolicyKind::FirstFit,
        PolicyKind::BestFit,
        PolicyKind::AppendPreferring,
    ];

    /// Stable name, as accepted by [`PolicyKind::from_name`].
    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::Null => "null",
            PolicyKind::FirstFit => "first-fit",
            PolicyKind::BestFit => "best-fit",
            PolicyKind::AppendPreferring => "append-run",
        }
    }

    /// The policy called `s`, if any (inverse of [`PolicyKind::name`]).
    pub fn from_name(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == s)
    }

    /// A fresh policy of this kind with an empty reusable set.
    pub fn build(self) -> Box<dyn FreeSpacePolicy> {
        match self {
            PolicyKind::Null => Box::new(NullPolicy::new()),
            PolicyKind::FirstFit => Box::new(FirstFitPolicy::new()),
            PolicyKind::BestFit => Box::new(BestFitPolicy::new()),
            PolicyKind::AppendPreferring => Box::new(AppendPreferringPolicy::new()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for kind in PolicyKind::ALL {
            assert_eq!(PolicyKind::from_name(kind.name()), Some(kind));
        }
        assert_eq!(PolicyKind::Null.name(), "null");
        assert_eq!(PolicyKind::FirstFit.name(), "first-fit");
        assert_eq!(PolicyKind::BestFit.name(), "best-fit");
        assert_eq!(PolicyKind::AppendPreferring.name(), "append-run");
    }

    #[test]
    fn all_lists_each_kind_once() {
        let names: std::collections::BTreeSet<_> =
            PolicyKind::ALL.iter().map(|k| k.name()).collect();
        assert_eq!(names.len(), PolicyKind::ALL.len());
    }

    #[test]
    fn unknown_name_is_none() {
        assert_eq!(PolicyKind::from_name("bestfit"), None);
        assert_eq!(PolicyKind::from_name("append"), None);
        assert_eq!(PolicyKind::from_name(""), None);
        assert_eq!(PolicyKind::from_name("Null"), None);
    }

    #[test]
    fn build_reports_its_kind() {
        for kind in PolicyKind::ALL {
            let policy = kind.build();
            assert_eq!(policy.kind(), kind);
            assert_eq!(policy.len(), 0);
        }
    }
}
