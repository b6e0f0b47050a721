//! Naming and constructing the available policies.

use crate::{FirstFitPolicy, FreeSpacePolicy, NullPolicy};

/// Which policy; selectable per open.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PolicyKind {
    /// Never reuse a page; the baseline every other policy is measured against.
    Null,
    /// Reuse the lowest-addressed run that fits.
    FirstFit,
}

impl PolicyKind {
    /// Every policy, so tools and tests can compare them all without listing them by hand.
    pub const ALL: [PolicyKind; 2] = [PolicyKind::Null, PolicyKind::FirstFit];

    /// Stable name, as accepted by [`PolicyKind::from_name`].
    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::Null => "null",
            PolicyKind::FirstFit => "first-fit",
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
    }

    #[test]
    fn unknown_name_is_none() {
        assert_eq!(PolicyKind::from_name("best-fit"), None);
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
