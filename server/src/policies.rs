//! The namespace's shared access policies: the root policy `RootManageSharedAccessKey` (the
//! operator's `--sas-key`, or the emulator's public development key, which may only be served
//! on loopback addresses), those given with `--policy`, and those the config file declares.

use std::net::SocketAddr;
use std::path::Path;

use ironbus_core::auth::{Authorizer, Rights, SasPolicy, DEVELOPMENT_KEY, DEVELOPMENT_POLICY_NAME};

use crate::ServerError;

/// The root policy, `RootManageSharedAccessKey` with the Manage right.
#[derive(Debug, Clone)]
pub struct RootPolicy {
    pub policy: SasPolicy,
    /// Whether its key is the emulator's well-known development key.
    pub development: bool,
}

impl RootPolicy {
    /// The key to show in connection strings: the development key itself, never the
    /// operator's.
    pub fn shown_key(&self) -> &str {
        if self.development {
            DEVELOPMENT_KEY
        } else {
            "<your --sas-key>"
        }
    }
}

/// The root policy with `key`; without one, the development key, refused if any of `served`
/// is not a loopback address (anyone who can reach the port could use it).
pub fn root_policy(
    key: Option<&str>,
    served: impl IntoIterator<Item = SocketAddr>,
) -> Result<RootPolicy, ServerError> {
    if let Some(key) = key {
        let policy = SasPolicy::new(DEVELOPMENT_POLICY_NAME, key.to_owned(), Rights::MANAGE);
        return Ok(RootPolicy { policy, development: false });
    }
    if let Some(addr) = served.into_iter().find(|addr| !addr.ip().is_loopback()) {
        return Err(ServerError::DevelopmentKeyExposed { addr });
    }
    tracing::warn!(
        "running with the emulator's well-known development key ({DEVELOPMENT_KEY}); anyone who \
         can reach the port can use it. Set --sas-key for a real key"
    );
    let policy = SasPolicy::new(DEVELOPMENT_POLICY_NAME, DEVELOPMENT_KEY, Rights::MANAGE);
    Ok(RootPolicy { policy, development: true })
}

/// The namespace's policies: the root policy, those given with `--policy`, then those the
/// config file at `config` declares. Names must be unique.
pub fn authorizer(
    root: SasPolicy,
    flags: &[SasPolicy],
    config: Option<&Path>,
) -> Result<Authorizer, ServerError> {
    let mut all = vec![root];
    all.extend_from_slice(flags);
    if let Some(path) = config {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ServerError::ReadConfig { path: path.to_owned(), source })?;
        let declared = crate::config::policies(&text).map_err(|source| ServerError::Config {
            path: path.to_owned(),
            source: Box::new(source),
        })?;
        all.extend(declared);
    }
    Authorizer::new(all).map_err(ServerError::Policies)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_development_key_is_served_on_loopback_only() {
        let loopback: SocketAddr = "127.0.0.1:5672".parse().unwrap();
        let open: SocketAddr = "0.0.0.0:5672".parse().unwrap();
        assert!(root_policy(None, [loopback]).unwrap().development);
        let error = root_policy(None, [loopback, open]).unwrap_err().to_string();
        assert!(error.contains("0.0.0.0:5672"), "{error}");
        let own = root_policy(Some("secret"), [open]).unwrap();
        assert!(!own.development);
        assert_eq!(own.shown_key(), "<your --sas-key>");
    }

    #[test]
    fn policies_from_flags_join_the_root_and_names_are_unique() {
        let root = SasPolicy::new("RootManageSharedAccessKey", "root", Rights::MANAGE);
        let flags = [SasPolicy::new("reader", "other", Rights::SEND)];
        let auth = authorizer(root.clone(), &flags, None).unwrap();
        assert_eq!(auth.policies().len(), 2);
        assert!(auth.verify_key("reader", "other").is_ok());
        let twice = [flags[0].clone(), flags[0].clone()];
        let error = format!("{:#}", authorizer(root, &twice, None).unwrap_err());
        assert!(error.contains("more than once"), "{error}");
    }
}
