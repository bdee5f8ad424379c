//! The rights a shared access policy or authorization rule grants.
//!
//! Invariant: Manage implies Send and Listen. [`Rights`] enforces it when built, so no check
//! elsewhere has to remember it.

use std::fmt;

/// One right a shared access policy can grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Right {
    /// Create, update and delete entities, and everything Send and Listen allow.
    Manage,
    /// Send messages, schedule and cancel scheduled messages.
    Send,
    /// Receive, peek, settle, renew locks, manage sessions and rules of a subscription.
    Listen,
}

impl fmt::Display for Right {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Right::Manage => "Manage",
            Right::Send => "Send",
            Right::Listen => "Listen",
        })
    }
}

/// The set of rights a policy grants.
///
/// # Behavior
/// - Manage implies Send and Listen, as in Service Bus: adding Manage adds all three, so a
///   `Rights` with Manage but without Send cannot be built.
/// - Built with the constants, [`Rights::of`], [`Rights::with`] or `collect()` over [`Right`]s.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Rights(u8);

impl Rights {
    const MANAGE_BIT: u8 = 1;
    const SEND_BIT: u8 = 2;
    const LISTEN_BIT: u8 = 4;

    /// No rights at all.
    pub const NONE: Rights = Rights(0);
    /// Send only.
    pub const SEND: Rights = Rights(Self::SEND_BIT);
    /// Listen only.
    pub const LISTEN: Rights = Rights(Self::LISTEN_BIT);
    /// Manage, and therefore Send and Listen too.
    pub const MANAGE: Rights = Rights(Self::MANAGE_BIT | Self::SEND_BIT | Self::LISTEN_BIT);

    /// The rights granted by `right` alone (Manage brings Send and Listen).
    pub const fn of(right: Right) -> Rights {
        match right {
            Right::Manage => Self::MANAGE,
            Right::Send => Self::SEND,
            Right::Listen => Self::LISTEN,
        }
    }

    /// `self` plus `right` (and what `right` implies).
    #[must_use]
    pub const fn with(self, right: Right) -> Rights {
        Rights(self.0 | Self::of(right).0)
    }

    /// Whether these rights allow an operation that needs `right`.
    pub const fn allows(self, right: Right) -> bool {
        let bit = match right {
            Right::Manage => Self::MANAGE_BIT,
            Right::Send => Self::SEND_BIT,
            Right::Listen => Self::LISTEN_BIT,
        };
        self.0 & bit != 0
    }

    fn iter(self) -> impl Iterator<Item = Right> {
        [Right::Manage, Right::Send, Right::Listen]
            .into_iter()
            .filter(move |&right| self.allows(right))
    }
}

impl From<Right> for Rights {
    fn from(right: Right) -> Self {
        Rights::of(right)
    }
}

impl FromIterator<Right> for Rights {
    fn from_iter<I: IntoIterator<Item = Right>>(rights: I) -> Self {
        rights.into_iter().fold(Rights::NONE, Rights::with)
    }
}

/// Lists the rights, e.g. `Send, Listen`; `none` for no rights.
impl fmt::Display for Rights {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut rights = self.iter().peekable();
        if rights.peek().is_none() {
            return f.write_str("none");
        }
        for (i, right) in rights.enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{right}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Rights {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Rights({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rights_and_their_implications() {
        use Right::*;
        let cases = [
            (Rights::NONE, [false, false, false]),
            (Rights::SEND, [false, true, false]),
            (Rights::LISTEN, [false, false, true]),
            (Rights::SEND.with(Listen), [false, true, true]),
            (Rights::MANAGE, [true, true, true]),
            (Rights::of(Manage), [true, true, true]),
            ([Manage].into_iter().collect(), [true, true, true]),
            (Rights::NONE.with(Send).with(Manage), [true, true, true]),
            ([Listen, Listen].into_iter().collect(), [false, false, true]),
        ];
        for (rights, [manage, send, listen]) in cases {
            assert_eq!(rights.allows(Manage), manage, "{rights:?} Manage");
            assert_eq!(rights.allows(Send), send, "{rights:?} Send");
            assert_eq!(rights.allows(Listen), listen, "{rights:?} Listen");
        }
        assert_eq!(Rights::MANAGE, [Send, Listen, Manage].into_iter().collect());
        assert_eq!(Rights::MANAGE.to_string(), "Manage, Send, Listen");
        assert_eq!(Rights::SEND.with(Listen).to_string(), "Send, Listen");
        assert_eq!(Rights::NONE.to_string(), "none");
    }
}
