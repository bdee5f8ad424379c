//! The tidy checks on synthetic input: a check that cannot fail proves nothing.

use super::*;

// ---- the checks themselves, on synthetic input ----

/// `cargo metadata`-shaped JSON: `members` are workspace crates (the rest come from a registry),
/// `edges` are `(from, to, kind)` with kind `None` (normal), `Some("dev")` or `Some("build")`.
fn synthetic_metadata(members: &[&str], edges: &[(&str, &str, Option<&str>)]) -> Value {
    let id = |name: &str| {
        if members.contains(&name) {
            format!("path+file:///ws/{name}#{name}@0.1.0")
        } else {
            format!("registry+https://github.com/rust-lang/crates.io-index#{name}@1.0.0")
        }
    };
    let mut names: BTreeSet<&str> = members.iter().copied().collect();
    names.extend(edges.iter().flat_map(|(from, to, _)| [*from, *to]));
    let packages: Vec<Value> = names
        .iter()
        .map(|name| {
            serde_json::json!({
                "id": id(name),
                "name": name,
                "manifest_path": format!("/ws/{name}/Cargo.toml"),
            })
        })
        .collect();
    let nodes: Vec<Value> = names
        .iter()
        .map(|name| {
            let deps: Vec<Value> = edges
                .iter()
                .filter(|(from, ..)| from == name)
                .map(|(_, to, kind)| {
                    serde_json::json!({
                        "name": to.replace('-', "_"),
                        "pkg": id(to),
                        "dep_kinds": [{ "kind": kind, "target": null }],
                    })
                })
                .collect();
            serde_json::json!({ "id": id(name), "deps": deps, "features": [] })
        })
        .collect();
    let workspace_members: Vec<String> = members.iter().map(|name| id(name)).collect();
    serde_json::json!({
        "packages": packages,
        "workspace_members": workspace_members,
        "resolve": { "nodes": nodes, "root": null },
    })
}

fn synthetic_graph(members: &[&str], edges: &[(&str, &str, Option<&str>)]) -> Graph {
    Graph::from_metadata(&synthetic_metadata(members, edges)).unwrap()
}

#[test]
fn forbidden_crate_reached_through_a_dev_dependency_is_reported() {
    let graph = synthetic_graph(
        &["ironbus-core", "ironbus-store-memory", "ironbus-test-kit"],
        &[
            ("ironbus-core", "bytes", None),
            ("ironbus-core", "ironbus-store-memory", Some("dev")),
            ("ironbus-store-memory", "ironbus-core", None),
            ("ironbus-core", "ironbus-test-kit", Some("dev")),
            ("ironbus-test-kit", "axum", None),
            ("axum", "hyper", None),
        ],
    );
    let found = forbidden_dependencies(&graph, CORE, CORE_FORBIDDEN).unwrap();
    assert_eq!(
        found,
        [
            "ironbus-core -(dev)-> ironbus-test-kit -> axum",
            "ironbus-core -(dev)-> ironbus-test-kit -> axum -> hyper",
        ]
    );
}

#[test]
fn forbidden_crate_reached_through_a_build_dependency_is_reported() {
    let graph = synthetic_graph(
        &["ironbus-core"],
        &[("ironbus-core", "cc-helper", Some("build")), ("cc-helper", "librocksdb-sys", None)],
    );
    let found = forbidden_dependencies(&graph, CORE, CORE_FORBIDDEN).unwrap();
    assert_eq!(found, ["ironbus-core -(build)-> cc-helper -> librocksdb-sys"]);
}

#[test]
fn forbidden_crate_outside_cores_closure_is_not_reported() {
    // The server may name concrete backends; the dev-dependency cycle must terminate.
    let graph = synthetic_graph(
        &["ironbus-core", "ironbus-store-memory", "ironbus"],
        &[
            ("ironbus-core", "ironbus-store-memory", Some("dev")),
            ("ironbus-store-memory", "ironbus-core", None),
            ("ironbus-store-memory", "ironbus-core", Some("dev")),
            ("ironbus", "ironbus-core", None),
            ("ironbus", "axum", None),
            ("ironbus", "rocksdb", None),
        ],
    );
    assert_eq!(forbidden_dependencies(&graph, CORE, CORE_FORBIDDEN).unwrap(), Vec::<String>::new());
}

#[test]
fn forbidden_check_needs_core_in_the_workspace() {
    let graph = synthetic_graph(&["ironbus"], &[("ironbus", "axum", None)]);
    assert!(forbidden_dependencies(&graph, CORE, CORE_FORBIDDEN).is_err());
}

#[test]
fn store_depending_on_another_workspace_crate_is_reported() {
    let graph = synthetic_graph(
        &[
            "ironbus-core",
            "ironbus-store-memory",
            "ironbus-store-rocksdb",
            "ironbus-transport-http",
        ],
        &[
            ("ironbus-store-rocksdb", "ironbus-core", None),
            ("ironbus-store-rocksdb", "rocksdb", None),
            ("ironbus-store-rocksdb", "ironbus-store-memory", None),
            ("ironbus-transport-http", "ironbus-core", None),
            ("ironbus-transport-http", "ironbus-store-memory", Some("build")),
        ],
    );
    assert_eq!(
        outward_dependencies(&graph),
        [
            "ironbus-store-rocksdb -> ironbus-store-memory",
            "ironbus-transport-http -> ironbus-store-memory"
        ]
    );
}

#[test]
fn cluster_crate_depending_on_a_concrete_store_is_reported() {
    let graph = synthetic_graph(
        &["ironbus-core", "ironbus-store-memory", "ironbus-cluster"],
        &[
            ("ironbus-cluster", "ironbus-core", None),
            ("ironbus-cluster", "ironbus-store-memory", Some("dev")),
            ("ironbus-cluster", "ironbus-store-memory", None),
        ],
    );
    assert_eq!(outward_dependencies(&graph), ["ironbus-cluster -> ironbus-store-memory"]);
}

#[test]
fn inward_check_accepts_core_registry_crates_and_dev_dependencies() {
    let graph = synthetic_graph(
        &["ironbus-core", "ironbus-store-memory", "ironbus-transport-amqp", "ironbus"],
        &[
            ("ironbus-store-memory", "ironbus-core", None),
            ("ironbus-transport-amqp", "ironbus-core", None),
            ("ironbus-transport-amqp", "fe2o3-amqp", None),
            ("ironbus-transport-amqp", "ironbus-store-memory", Some("dev")),
            ("ironbus", "ironbus-store-memory", None),
            ("ironbus", "ironbus-transport-amqp", None),
        ],
    );
    assert_eq!(outward_dependencies(&graph), Vec::<String>::new());
}

#[test]
fn metrics_crate_depending_on_a_store_or_the_server_is_reported() {
    let graph = synthetic_graph(
        &[
            "ironbus-core",
            "ironbus-store-memory",
            "ironbus-transport-http",
            "ironbus-metrics",
            "ironbus",
        ],
        &[
            ("ironbus-metrics", "ironbus-core", None),
            ("ironbus-metrics", "ironbus-transport-http", None),
            ("ironbus-metrics", "ironbus-store-memory", None),
            ("ironbus-metrics", "ironbus", Some("build")),
            ("ironbus-metrics", "ironbus-store-memory", Some("dev")),
            ("ironbus", "ironbus-metrics", None),
        ],
    );
    assert_eq!(
        outward_dependencies(&graph),
        ["ironbus-metrics -> ironbus-store-memory", "ironbus-metrics -> ironbus"]
    );
}

#[test]
fn link_depending_on_any_workspace_crate_is_reported() {
    let graph = synthetic_graph(
        &["ironbus-core", "ironbus-link", "ironbus"],
        &[
            ("ironbus-link", "hyper", None),
            ("ironbus-link", "ironbus-core", None),
            ("ironbus", "ironbus-link", None),
        ],
    );
    assert_eq!(outward_dependencies(&graph), ["ironbus-link -> ironbus-core"]);
}

#[test]
fn exporter_named_outside_the_metrics_crate_is_reported() {
    let graph = synthetic_graph(
        &["ironbus-core", "ironbus-metrics", "ironbus", "ironbus-bench"],
        &[
            ("ironbus-metrics", "ironbus-core", None),
            ("ironbus-metrics", EXPORTER, None),
            ("ironbus", "ironbus-metrics", None),
            ("ironbus", EXPORTER, None),
            ("ironbus-bench", EXPORTER, Some("dev")),
        ],
    );
    let mut found = exporter_dependents(&graph);
    found.sort();
    assert_eq!(found, [format!("ironbus -> {EXPORTER}"), format!("ironbus-bench -> {EXPORTER}")]);
}

#[test]
fn dependencies_taken_from_the_workspace_are_accepted() {
    let manifest = r#"
[package]
name = "ironbus-example"
version = "0.1.0"                      # the package's own version is not a dependency
edition.workspace = true

[features]
testing = ["dep:rand"]

[dependencies]
anyhow.workspace = true
tokio = { workspace = true, features = ["rt-multi-thread"] }
rand = { workspace = true, optional = true } # a comment = "1"
uuid = { workspace = true, features = [
    "v4",  # trailing comment
    "serde",
] }
local = { path = "../local" }
# serde = "1"

[dev-dependencies.proptest]
workspace = true

[target.'cfg(unix)'.dependencies]
libc.workspace = true

[[bin]]
name = "example"
path = "src/main.rs"

[workspace.dependencies]
serde = "1"
"#;
    assert_eq!(unpinned_dependencies(manifest).unwrap(), Vec::<String>::new());
}

#[test]
fn dependencies_with_their_own_version_are_reported() {
    let manifest = r#"
[dependencies]
anyhow.workspace = true
serde = "1" # comment
rand = { version = "0.8", optional = true }
local = { path = "../local", version = "0.1" }
remote = { git = "https://example.com/remote.git" }
dotted.version = "2"

[dev-dependencies.proptest]
version = "1"

[build-dependencies]
cc = "1"

[target.'cfg(windows)'.dependencies]
winapi = { version = "0.3", features = [
    "winbase",
] }
"#;
    assert_eq!(
        unpinned_dependencies(manifest).unwrap(),
        [
            r#"[build-dependencies] cc = "1""#,
            r#"[dependencies] dotted = { version = "2" }"#,
            r#"[dependencies] local = { path = "../local", version = "0.1" }"#,
            r#"[dependencies] rand = { optional = true, version = "0.8" }"#,
            r#"[dependencies] remote = { git = "https://example.com/remote.git" }"#,
            r#"[dependencies] serde = "1""#,
            r#"[dev-dependencies] proptest = { version = "1" }"#,
            r#"[target.cfg(windows).dependencies] winapi = { features = ["winbase"], version = "0.3" }"#,
        ]
    );
}

// ---- the ARCHITECTURE.md checks, on synthetic input ----

const SAMPLE_MAP: &str = "\
# A map
- `core/src/made_up.rs` — a module that is not there; `xtask/src/tidy.rs` is.
- `core/src/broker/` a folder, `Cargo.toml` a file at the root, `README.md` too.
- Not paths: `{topic}/Subscriptions/{name}`, `…/Rules`, `$Transfer/$DeadLetterQueue`,
  `sb://host/q`, `/health`, `../shared/protocol/amqp.md`, `Broker::send`, `cargo xtask ci`,
  `<data-dir>/tls/`, `x-opt-lock-token`, `main.rs` is one (and does not exist at the root).
- A span across a line break: `core/src/no_such
  file.rs` is not a path (it has a space).
```text
`fenced/made_up.rs` is inside a fence
```
A path outside backticks, core/src/unchecked.rs, is prose.
Last: `fuzz/seeds/`.
";

#[test]
fn paths_are_the_code_spans_that_look_like_paths() {
    assert_eq!(
        named_paths(SAMPLE_MAP),
        [
            (2, "core/src/made_up.rs"),
            (2, "xtask/src/tidy.rs"),
            (3, "core/src/broker/"),
            (3, "Cargo.toml"),
            (3, "README.md"),
            (6, "main.rs"),
            (13, "fuzz/seeds/"),
        ]
    );
}

#[test]
fn a_made_up_path_is_reported_with_its_line() {
    assert_eq!(
        missing_paths(workspace_root(), SAMPLE_MAP),
        ["line 2: `core/src/made_up.rs`", "line 6: `main.rs`"]
    );
}

#[test]
fn a_map_over_the_line_limit_is_reported() {
    let short = "line\n".repeat(300);
    assert_eq!(check_line_count("MAP.md", &short, 300), Ok(()));
    let long = "line\n".repeat(301);
    let error = check_line_count("MAP.md", &long, 300).unwrap_err();
    assert!(error.starts_with("MAP.md has 301 lines, more than 300"), "{error}");
}
