//! Unit tests of the compat task's pure parts.

use std::collections::BTreeSet;

use super::*;

/// Queue names the suites use on purpose without declaring them.
const UNDECLARED: &[&str] = &["no-such-queue"];
/// Declared queues only the JS suite uses: a footer (which rhea writes before the body), and
/// batch delete (it needs the 7.10 beta SDK, which only the JS suite installs).
const JS_ONLY: &[&str] =
    &["footer", "delete-messages", "delete-dead-letters", "purge-messages", "delete-sessions"];

#[test]
fn config_declares_every_queue_for_every_suite_with_all_properties() {
    let config = config_json();
    let namespace = &config["UserConfig"]["Namespaces"][0];
    assert_eq!(namespace["Name"], NAMESPACE);
    let queues = namespace["Queues"].as_array().unwrap();
    let prefixed = SUITES.iter().filter(|suite| suite.prefix.is_some()).count();
    assert_eq!(queues.len(), QUEUES.len() * prefixed + 2 + RUST_TXN_QUEUES.len());
    assert!(queues.iter().any(|q| q["Name"] == RUST_QUEUE));
    for name in RUST_TXN_QUEUES {
        let txn = queues.iter().find(|q| q["Name"] == name).unwrap();
        assert_eq!(txn["Properties"]["LockDuration"], "PT5S");
    }
    let names: BTreeSet<&str> = queues.iter().map(|q| q["Name"].as_str().unwrap()).collect();
    assert_eq!(names.len(), queues.len(), "queue names are unique");
    for queue in queues {
        let properties = queue["Properties"].as_object().unwrap();
        for (key, _) in DEFAULT_PROPERTIES {
            assert!(properties.contains_key(*key), "{} lacks {key}", queue["Name"]);
        }
    }
    let policies = namespace["Policies"].as_array().unwrap();
    assert_eq!(policies.len(), POLICIES.len());
    assert_eq!(policies_env().split(';').count(), POLICIES.len());
    let lock_expiry = queues.iter().find(|q| q["Name"] == "py-lock-expiry").unwrap();
    assert_eq!(lock_expiry["Properties"]["LockDuration"], "PT5S");
    assert_eq!(lock_expiry["Properties"]["MaxDeliveryCount"], 2);
    let partitioned = queues.iter().find(|q| q["Name"] == "js-partitioned").unwrap();
    assert_eq!(partitioned["Properties"]["EnablePartitioning"], true);
    assert_eq!(partitioned["Properties"]["PartitionCount"], 16);
}

#[test]
fn mssuite_runs_only_when_named() {
    let default: Vec<&str> =
        SUITES.iter().filter(|suite| suite.in_all).map(|suite| suite.name).collect();
    assert_eq!(default, ["python", "js", "rust"]);
    let mssuite = SUITES.iter().find(|suite| suite.name == "mssuite").unwrap();
    assert!(workspace_root().join(mssuite.dir).join("run.py").is_file());
    assert!(workspace_root().join(mssuite.dir).join("requirements.txt").is_file());
}

#[test]
fn connection_string_is_the_emulators_with_our_port() {
    assert_eq!(
        connection_string(5673),
        "Endpoint=sb://127.0.0.1:5673;SharedAccessKeyName=RootManageSharedAccessKey;\
         SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true"
    );
}

/// The `queue("…")` names a suite's sources use.
fn queue_names_used(dir: &Path, extension: &str) -> BTreeSet<String> {
    let mut used = BTreeSet::new();
    let mut pending = vec![dir.to_owned()];
    while let Some(dir) = pending.pop() {
        for entry in fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                if !name.starts_with('.') && name != "node_modules" && name != "__pycache__" {
                    pending.push(path);
                }
            } else if name.ends_with(extension) {
                let text = fs::read_to_string(&path).unwrap();
                used.extend(queue_calls(&text));
            }
        }
    }
    used
}

/// The names in `queue("…")` calls (not `create_queue("…")` and the like).
fn queue_calls(text: &str) -> Vec<String> {
    let mut pieces = text.split("queue(\"");
    let mut before = pieces.next().unwrap_or_default();
    let mut names = Vec::new();
    for rest in pieces {
        let call = !before.ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == '.');
        if let (true, Some((name, _))) = (call, rest.split_once('"')) {
            names.push(name.to_owned());
        }
        before = rest;
    }
    names
}

#[test]
fn queue_calls_are_found() {
    assert_eq!(queue_calls(r#"a = queue("x-y"); b = lockReceiver(c, queue("z"))"#), ["x-y", "z"]);
    assert_eq!(queue_calls(r#"admin.create_queue("orders"); queue("a")"#), ["a"]);
}

#[test]
fn suites_use_exactly_the_declared_queues() {
    let declared: BTreeSet<String> = QUEUES.iter().map(|(name, _)| (*name).to_owned()).collect();
    for (suite, extension) in [("compat/python", ".py"), ("compat/js", ".mjs")] {
        let mut used = queue_names_used(&workspace_root().join(suite), extension);
        for name in UNDECLARED {
            assert!(used.remove(*name), "{suite} no longer uses the undeclared `{name}`");
        }
        let missing: Vec<_> = used.difference(&declared).collect();
        assert!(
            missing.is_empty(),
            "{suite} uses undeclared queues {missing:?}: add them to QUEUES"
        );
        let unused: Vec<_> = declared
            .difference(&used)
            .filter(|name| suite == "compat/js" || !JS_ONLY.contains(&name.as_str()))
            .collect();
        assert!(unused.is_empty(), "{suite} never uses the declared queues {unused:?}");
    }
}
