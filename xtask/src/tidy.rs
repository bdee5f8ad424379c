//! Workspace invariants, checked by plain `#[test]`s so that `cargo test --workspace` enforces
//! them (rust-analyzer's `tidy.rs` convention).
//!
//! Each check is a pure function over the `cargo metadata` graph, a manifest's text or a
//! document's text, and has unit tests on synthetic input showing that it reports a violation:
//! a check that cannot fail proves nothing.

use std::{
    collections::{BTreeMap, BTreeSet, VecDeque},
    fs,
    path::{Path, PathBuf},
    sync::OnceLock,
};

use anyhow::{bail, Context, Result};
use serde_json::Value;

use crate::{cargo, workspace_root};

/// Crates `ironbus-core` must never reach, not even through a dev-dependency: the concrete
/// store, transports and exporter belong to their own crates (STYLE.md, "Workspace").
const CORE_FORBIDDEN: &[&str] = &[
    "rocksdb",
    "librocksdb-sys",
    "axum",
    "fe2o3-amqp",
    "metrics-exporter-prometheus",
    "hyper",
    METRICS,
];

/// The only workspace crate that stores and transports may depend on.
const CORE: &str = "ironbus-core";

/// The crate on top that catalogues every metric and alone knows the exporter.
const METRICS: &str = "ironbus-metrics";

/// The cluster's internal link: it moves opaque bytes, so it depends on no workspace crate
/// (the server wires it to the core).
const LINK: &str = "ironbus-link";

/// The metrics exporter, which only [`METRICS`] may name.
const EXPORTER: &str = "metrics-exporter-prometheus";

/// The workspace crates a workspace crate may depend on (normal and build dependencies; dev-
/// dependencies excepted), by the prefix of its name: the arrows ARCHITECTURE.md draws. Crates
/// not listed (the server, bench, xtask) may depend on any.
const ARROWS: &[(&str, &[&str])] = &[
    ("ironbus-store-", &[CORE]),
    ("ironbus-transport-", &[CORE]),
    (METRICS, &[CORE, "ironbus-transport-amqp", "ironbus-transport-http"]),
    (LINK, &[]),
    // Ownership across nodes: the core's `Store` trait and fence, never a concrete store.
    ("ironbus-cluster", &[CORE]),
    // The operators' command line is a client of any namespace: it knows no broker code.
    ("ironbus-cli", &[]),
];

const DOCS: &[&str] = &["README.md", "ARCHITECTURE.md"];

#[test]
fn core_depends_on_no_concrete_backend() {
    let graph = workspace_graph();
    let core = graph.member_id(CORE).unwrap();
    assert!(
        graph.edges(core).iter().any(|edge| edge.kinds.contains(&DepKind::Dev)),
        "the graph shows no dev-dependency of {CORE}: the check below would miss them"
    );
    let found = forbidden_dependencies(graph, CORE, CORE_FORBIDDEN).unwrap();
    assert!(
        found.is_empty(),
        "{CORE} must not depend on a concrete backend, not even as a dev-dependency:\n  {}",
        found.join("\n  ")
    );
}

#[test]
fn dependencies_point_inward() {
    let found = outward_dependencies(workspace_graph());
    assert!(
        found.is_empty(),
        "stores, transports and the cluster crate may depend on no workspace crate but {CORE}, \
         {METRICS} on no other but the transports, and {LINK} on none (dev-dependencies \
         excepted):\n  {}",
        found.join("\n  ")
    );
}

#[test]
fn only_the_metrics_crate_knows_the_exporter() {
    let graph = workspace_graph();
    assert!(
        graph
            .edges(graph.member_id(METRICS).unwrap())
            .iter()
            .any(|e| graph.name(&e.to) == EXPORTER),
        "{METRICS} does not depend on {EXPORTER}: the check below proves nothing"
    );
    let found = exporter_dependents(graph);
    assert!(
        found.is_empty(),
        "only {METRICS} may depend on {EXPORTER} (the others use it through {METRICS}):\n  {}",
        found.join("\n  ")
    );
}

/// The shipped binary's package, and the testing-only features of the core it must not build
/// with by default (they come only with its `fault-injection` feature, for the compat suites).
const SERVER: &str = "ironbus";
const TESTING_FEATURES: &[&str] = &["testing"];

#[test]
fn the_default_server_build_has_no_testing_code() {
    let output = cargo()
        .args(["tree", "-p", SERVER, "-e", "normal,build", "--prefix", "none", "-f", "{p}|{f}"])
        .output()
        .expect("cannot run `cargo tree`");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let tree = String::from_utf8(output.stdout).expect("`cargo tree` printed UTF-8");
    let built = tree.lines().any(|line| line.starts_with(&format!("{CORE} ")));
    assert!(built, "{SERVER} does not build {CORE}: the check below proves nothing");
    let features = features_of(&tree, CORE);
    let testing: Vec<_> =
        features.iter().filter(|f| TESTING_FEATURES.contains(&f.as_str())).collect();
    assert!(
        testing.is_empty(),
        "`cargo build -p {SERVER}` builds {CORE} with {testing:?}: the shipped binary must not \
         link test hooks (give them to the server's `fault-injection` feature instead)"
    );
}

/// The features `package` is built with, from `cargo tree --prefix none -f '{p}|{f}'`.
fn features_of(tree: &str, package: &str) -> BTreeSet<String> {
    tree.lines()
        .filter_map(|line| line.split_once('|'))
        .filter(|(p, _)| p.split(' ').next() == Some(package))
        .flat_map(|(_, features)| features.split([',', ' ']))
        .filter(|f| !f.is_empty() && *f != "(*)")
        .map(str::to_owned)
        .collect()
}

#[test]
fn features_are_read_from_the_tree() {
    let tree = "ironbus v0.1.0 (/ws/server)|\n\
                ironbus-core v0.1.0 (/ws/core)|testing\n\
                ironbus-core v0.1.0 (/ws/core)|testing (*)\n\
                ironbus-core-extra v0.1.0 (/ws/x)|other\n";
    assert_eq!(features_of(tree, CORE), BTreeSet::from(["testing".to_owned()]));
    assert!(features_of(tree, SERVER).is_empty());
}

#[test]
fn workspace_deps_are_pinned_once() {
    let mut found = Vec::new();
    for manifest in &workspace_graph().member_manifests {
        let text = fs::read_to_string(manifest)
            .unwrap_or_else(|err| panic!("cannot read {}: {err}", manifest.display()));
        let shown = manifest.strip_prefix(workspace_root()).unwrap_or(manifest).display();
        let unpinned =
            unpinned_dependencies(&text).unwrap_or_else(|err| panic!("{shown}: {err:#}"));
        found.extend(unpinned.into_iter().map(|dep| format!("{shown}: {dep}")));
    }
    assert!(
        found.is_empty(),
        "take these with `workspace = true` and pin their version once, in the root \
         Cargo.toml's [workspace.dependencies]:\n  {}",
        found.join("\n  ")
    );
}

#[test]
fn docs_exist() {
    let missing: Vec<&str> =
        DOCS.iter().copied().filter(|doc| !workspace_root().join(doc).is_file()).collect();
    assert!(missing.is_empty(), "missing at the workspace root: {}", missing.join(", "));
}

// ---- ARCHITECTURE.md: a map whose every path leads somewhere ----

/// The architecture map (issue 25: "a map, not a manual").
const ARCHITECTURE: &str = "ARCHITECTURE.md";
/// The most lines the map may have; detail beyond it belongs in the crates' `//!` docs.
const ARCHITECTURE_MAX_LINES: usize = 300;
/// File name endings that make a code span a path even without a `/`.
const PATH_EXTENSIONS: &[&str] = &[".rs", ".md", ".toml", ".sh", ".py", ".json"];

#[test]
fn architecture_names_only_existing_paths() {
    let text = fs::read_to_string(workspace_root().join(ARCHITECTURE)).unwrap();
    let missing = missing_paths(workspace_root(), &text);
    assert!(
        missing.is_empty(),
        "{ARCHITECTURE} names paths that do not exist (write every path from the workspace \
         root; `named_paths` in xtask/src/tidy.rs says what counts as a path):\n  {}",
        missing.join("\n  ")
    );
    assert!(
        named_paths(&text).len() >= 20,
        "{ARCHITECTURE} names hardly any paths: is the check still reading it?"
    );
}

#[test]
fn architecture_is_a_map_not_a_manual() {
    let text = fs::read_to_string(workspace_root().join(ARCHITECTURE)).unwrap();
    if let Err(message) = check_line_count(ARCHITECTURE, &text, ARCHITECTURE_MAX_LINES) {
        panic!("{message}");
    }
}

/// The repository paths `markdown` names, with their line numbers: its inline code spans
/// (single backticks; fenced code blocks are not read) that
///
/// - consist of path characters only: ASCII letters and digits, `_`, `-`, `.` and `/` — so
///   placeholders (`{topic}/Subscriptions`), elisions (`…/Rules`), sub-queue names
///   (`$Transfer/$DeadLetterQueue`), URLs (`sb://host/q`), `<data-dir>/tls/`, commands with
///   spaces and Rust paths (`Broker::send`) are not paths;
/// - do not start with `/` (an HTTP route such as `/health`) or `../` (outside the
///   repository, such as the shared protocol notes);
/// - contain a `/` or end in one of [`PATH_EXTENSIONS`].
///
/// A path is relative to the workspace root; one ending in `/` names a directory.
fn named_paths(markdown: &str) -> Vec<(usize, &str)> {
    let mut found = Vec::new();
    let mut in_fence = false;
    let mut offset = 0;
    // Text outside fenced blocks, as (byte offset, text) runs, so a span may cross a line
    // break inside a paragraph but never a fence.
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for line in markdown.split_inclusive('\n') {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
        } else if !in_fence {
            match runs.last_mut() {
                Some((_, end)) if *end == offset => *end += line.len(),
                _ => runs.push((offset, offset + line.len())),
            }
        }
        offset += line.len();
    }
    for (start, end) in runs {
        let run = &markdown[start..end];
        let mut at = 0;
        for (i, piece) in run.split('`').enumerate() {
            if i % 2 == 1 && is_repository_path(piece) {
                let line = markdown[..start + at].matches('\n').count() + 1;
                found.push((line, piece));
            }
            at += piece.len() + 1;
        }
    }
    found
}

fn is_repository_path(span: &str) -> bool {
    let path_chars =
        span.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/'));
    let looks_like_one =
        span.contains('/') || PATH_EXTENSIONS.iter().any(|ext| span.ends_with(ext));
    path_chars
        && looks_like_one
        && !span.starts_with('/')
        && !span.starts_with("../")
        && span != "."
}

/// The paths `markdown` names that do not exist under `root`, each as `line N: `path``.
fn missing_paths(root: &Path, markdown: &str) -> Vec<String> {
    named_paths(markdown)
        .into_iter()
        .filter(|(_, path)| !root.join(path).exists())
        .map(|(line, path)| format!("line {line}: `{path}`"))
        .collect()
}

/// Fails when `text` (the document `name`) has more than `max` lines.
fn check_line_count(name: &str, text: &str, max: usize) -> Result<(), String> {
    let lines = text.lines().count();
    if lines > max {
        return Err(format!(
            "{name} has {lines} lines, more than {max}: it is the map, not the manual; move \
             detail into the `//!` docs of the crate or module it describes"
        ));
    }
    Ok(())
}

// ---- Source files of one concern each ----

/// The most lines a source file may have (issue 25: rules in files of one concern each).
const SOURCE_MAX_LINES: usize = 800;

#[test]
fn no_source_file_is_over_800_lines() {
    let output = std::process::Command::new("git")
        .args(["ls-files", "*.rs"])
        .current_dir(workspace_root())
        .output()
        .unwrap();
    assert!(output.status.success(), "git ls-files failed");
    let listed = String::from_utf8(output.stdout).unwrap();
    let sources: Vec<&str> = listed.lines().filter(|path| !is_test_source(path)).collect();
    assert!(sources.len() > 100, "found hardly any source files: {}", sources.len());
    let long: Vec<String> = sources
        .iter()
        .filter_map(|path| {
            let text = fs::read_to_string(workspace_root().join(path)).ok()?;
            let lines = text.lines().count();
            (lines > SOURCE_MAX_LINES).then(|| format!("{path}: {lines} lines"))
        })
        .collect();
    assert!(
        long.is_empty(),
        "source files over {SOURCE_MAX_LINES} lines (split them by concern):\n  {}",
        long.join("\n  ")
    );
}

/// Test code, which may be long: files under a `tests/` directory and `tests.rs` or
/// `*_tests.rs` modules.
fn is_test_source(path: &str) -> bool {
    path.split('/').any(|part| part == "tests")
        || path.ends_with("/tests.rs")
        || path.ends_with("_tests.rs")
}

#[test]
fn test_sources_are_told_apart_from_the_rest() {
    assert!(is_test_source("core/tests/sessions.rs"));
    assert!(is_test_source("core/src/partition/tests.rs"));
    assert!(is_test_source("server/src/http/websocket_tests.rs"));
    assert!(is_test_source("xtask/src/compat/tests.rs"));
    assert!(!is_test_source("core/src/testing/conformance.rs"));
    assert!(!is_test_source("core/src/partition.rs"));
}

/// The files whose string constants name every metric ironbus records (the catalogue in
/// `metrics/src/catalogue.rs` lists each of them, as its tests check).
const METRIC_CATALOGUES: &[&str] =
    &["core/src/metrics.rs", "transport-http/src/metrics.rs", "metrics/src/amqp.rs"];
/// The Grafana dashboard that ships in the repository.
const DASHBOARD: &str = "deploy/grafana/ironbus.json";

/// Every `"ironbus_…"` string literal in `text`.
fn metric_names(text: &str) -> BTreeSet<String> {
    text.split('"')
        .skip(1)
        .step_by(2)
        .filter(|s| {
            s.starts_with("ironbus_") && s.chars().all(|c| c.is_ascii_lowercase() || c == '_')
        })
        .map(str::to_owned)
        .collect()
}

#[test]
fn dashboard_queries_only_catalogued_metrics() {
    let mut catalogued = BTreeSet::new();
    for catalogue in METRIC_CATALOGUES {
        catalogued
            .extend(metric_names(&fs::read_to_string(workspace_root().join(catalogue)).unwrap()));
    }
    let dashboard: Value =
        serde_json::from_str(&fs::read_to_string(workspace_root().join(DASHBOARD)).unwrap())
            .expect("the dashboard is valid JSON");
    let mut used = BTreeSet::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            let expr = target["expr"].as_str().expect("expr");
            for word in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                if word.starts_with("ironbus_") {
                    // Histogram series carry suffixes the catalogue does not name.
                    let base = ["_bucket", "_sum", "_count"]
                        .iter()
                        .find_map(|suffix| word.strip_suffix(suffix))
                        .unwrap_or(word);
                    used.insert(base.to_owned());
                }
            }
        }
    }
    let unknown: Vec<_> = used.difference(&catalogued).collect();
    assert!(unknown.is_empty(), "{DASHBOARD} queries metrics no catalogue lists: {unknown:?}");
    assert!(used.len() >= 8, "the dashboard covers the catalogue: {used:?}");
}

// ---- the dependency graph, from `cargo metadata` ----

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum DepKind {
    Normal,
    Dev,
    Build,
}

#[derive(Debug)]
struct Edge {
    to: String,
    kinds: BTreeSet<DepKind>,
}

/// The resolved package graph: every package, every kind of dependency, all features on.
#[derive(Debug)]
struct Graph {
    /// Package id → package name.
    names: BTreeMap<String, String>,
    /// Ids of the workspace members.
    members: BTreeSet<String>,
    member_manifests: Vec<PathBuf>,
    /// Package id → its direct dependencies.
    deps: BTreeMap<String, Vec<Edge>>,
}

impl Graph {
    fn from_metadata(metadata: &Value) -> Result<Graph> {
        let mut names = BTreeMap::new();
        let mut manifests = BTreeMap::new();
        for package in array(metadata, "packages")? {
            let id = string(package, "id")?;
            names.insert(id.to_owned(), string(package, "name")?.to_owned());
            manifests.insert(id, string(package, "manifest_path")?);
        }
        let mut members = BTreeSet::new();
        let mut member_manifests = Vec::new();
        for member in array(metadata, "workspace_members")? {
            let id = member.as_str().context("workspace member id is not a string")?;
            let manifest = manifests.get(id).with_context(|| format!("no package `{id}`"))?;
            members.insert(id.to_owned());
            member_manifests.push(PathBuf::from(manifest));
        }
        let resolve = metadata
            .get("resolve")
            .filter(|resolve| !resolve.is_null())
            .context("metadata has no `resolve` graph (was it produced with `--no-deps`?)")?;
        let mut deps = BTreeMap::new();
        for node in array(resolve, "nodes")? {
            let mut edges = Vec::new();
            for dep in array(node, "deps")? {
                let mut kinds = BTreeSet::new();
                for kind in array(dep, "dep_kinds")? {
                    kinds.insert(match kind.get("kind").and_then(Value::as_str) {
                        None => DepKind::Normal,
                        Some("dev") => DepKind::Dev,
                        Some("build") => DepKind::Build,
                        Some(other) => bail!("unknown dependency kind `{other}`"),
                    });
                }
                edges.push(Edge { to: string(dep, "pkg")?.to_owned(), kinds });
            }
            deps.insert(string(node, "id")?.to_owned(), edges);
        }
        Ok(Graph { names, members, member_manifests, deps })
    }

    fn name<'a>(&'a self, id: &'a str) -> &'a str {
        self.names.get(id).map_or(id, String::as_str)
    }

    fn member_id(&self, name: &str) -> Result<&str> {
        self.members
            .iter()
            .find(|id| self.name(id) == name)
            .map(String::as_str)
            .with_context(|| format!("`{name}` is not a workspace member"))
    }

    fn edges(&self, id: &str) -> &[Edge] {
        self.deps.get(id).map_or(&[], Vec::as_slice)
    }
}

fn array<'a>(value: &'a Value, key: &str) -> Result<&'a Vec<Value>> {
    value.get(key).and_then(Value::as_array).with_context(|| format!("no array `{key}`"))
}

fn string<'a>(value: &'a Value, key: &str) -> Result<&'a str> {
    value.get(key).and_then(Value::as_str).with_context(|| format!("no string `{key}`"))
}

/// This workspace's graph, from `cargo metadata --all-features` (which includes dev- and
/// build-dependencies and every platform's dependencies), loaded once per test run.
fn workspace_graph() -> &'static Graph {
    static GRAPH: OnceLock<Graph> = OnceLock::new();
    GRAPH.get_or_init(|| {
        let output = cargo()
            .args(["metadata", "--format-version", "1", "--all-features"])
            .output()
            .expect("cannot run `cargo metadata`");
        assert!(
            output.status.success(),
            "`cargo metadata` failed ({}):\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        let metadata: Value =
            serde_json::from_slice(&output.stdout).expect("`cargo metadata` printed invalid JSON");
        Graph::from_metadata(&metadata).expect("unexpected `cargo metadata` output")
    })
}

/// Every crate named in `forbidden` that `root` reaches through dependencies of any kind
/// (normal, dev, build), each shown with a shortest path from `root`.
fn forbidden_dependencies(graph: &Graph, root: &str, forbidden: &[&str]) -> Result<Vec<String>> {
    let root = graph.member_id(root)?;
    // Breadth-first, remembering how each package was first reached; the visited set also
    // ends cycles such as core -(dev)-> store-memory -> core.
    let mut reached_from: BTreeMap<&str, Option<(&str, &Edge)>> = BTreeMap::new();
    reached_from.insert(root, None);
    let mut queue = VecDeque::from([root]);
    let mut found = Vec::new();
    while let Some(id) = queue.pop_front() {
        if forbidden.contains(&graph.name(id)) {
            found.push(path_to(graph, &reached_from, id));
        }
        for edge in graph.edges(id) {
            if !reached_from.contains_key(edge.to.as_str()) {
                reached_from.insert(&edge.to, Some((id, edge)));
                queue.push_back(&edge.to);
            }
        }
    }
    Ok(found)
}

/// Renders the path by which `id` was reached, e.g. `ironbus-core -(dev)-> a -> rocksdb`.
fn path_to(
    graph: &Graph,
    reached_from: &BTreeMap<&str, Option<(&str, &Edge)>>,
    id: &str,
) -> String {
    let mut rendered = graph.name(id).to_owned();
    let mut current = id;
    while let Some(Some((parent, edge))) = reached_from.get(current) {
        let arrow = if edge.kinds.contains(&DepKind::Normal) {
            "->"
        } else if edge.kinds.contains(&DepKind::Build) {
            "-(build)->"
        } else {
            "-(dev)->"
        };
        rendered = format!("{} {arrow} {rendered}", graph.name(parent));
        current = parent;
    }
    rendered
}

/// Dependencies (normal or build) of workspace crates on workspace crates that [`ARROWS`]
/// does not allow them.
fn outward_dependencies(graph: &Graph) -> Vec<String> {
    let mut found = Vec::new();
    for id in &graph.members {
        let name = graph.name(id);
        let Some((_, allowed)) = ARROWS.iter().find(|(prefix, _)| name.starts_with(prefix)) else {
            continue;
        };
        for edge in graph.edges(id) {
            let to = graph.name(&edge.to);
            let production = edge.kinds.iter().any(|kind| *kind != DepKind::Dev);
            if production && graph.members.contains(&edge.to) && !allowed.contains(&to) {
                found.push(format!("{name} -> {to}"));
            }
        }
    }
    found
}

/// Workspace crates other than [`METRICS`] that depend on the exporter directly, through any
/// kind of dependency.
fn exporter_dependents(graph: &Graph) -> Vec<String> {
    let mut found = Vec::new();
    for id in &graph.members {
        let name = graph.name(id);
        if name != METRICS && graph.edges(id).iter().any(|edge| graph.name(&edge.to) == EXPORTER) {
            found.push(format!("{name} -> {EXPORTER}"));
        }
    }
    found
}

// ---- manifests: dependencies taken from [workspace.dependencies] ----

const DEP_TABLES: &[&str] = &["dependencies", "dev-dependencies", "build-dependencies"];

/// The dependencies a member manifest declares with their own version, git or registry
/// source instead of `workspace = true`; path-only dependencies are accepted. Every dependency
/// table counts, platform-specific ones (`[target.'cfg(..)'.dependencies]`) included.
fn unpinned_dependencies(manifest: &str) -> Result<Vec<String>> {
    let manifest: toml::Table = manifest.parse().context("not a valid TOML manifest")?;
    fn dep_tables<'a>(
        prefix: &str,
        parent: &'a toml::Table,
        out: &mut Vec<(String, &'a toml::Table)>,
    ) {
        for name in DEP_TABLES {
            if let Some(toml::Value::Table(deps)) = parent.get(*name) {
                out.push((format!("{prefix}{name}"), deps));
            }
        }
    }
    let mut tables = Vec::new();
    dep_tables("", &manifest, &mut tables);
    if let Some(toml::Value::Table(targets)) = manifest.get("target") {
        for (cfg, target) in targets {
            if let toml::Value::Table(target) = target {
                dep_tables(&format!("target.{cfg}."), target, &mut tables);
            }
        }
    }
    let mut found: Vec<String> = tables
        .into_iter()
        .flat_map(|(table, deps)| {
            deps.iter()
                .filter(|(_, spec)| !is_pinned_by_workspace(spec))
                .map(move |(name, spec)| format!("[{table}] {name} = {spec}"))
        })
        .collect();
    found.sort();
    Ok(found)
}

/// `workspace = true`, or a path without a version, git or registry source of its own.
fn is_pinned_by_workspace(spec: &toml::Value) -> bool {
    let toml::Value::Table(spec) = spec else { return false };
    let workspace = spec.get("workspace") == Some(&toml::Value::Boolean(true));
    let path_only = spec.contains_key("path")
        && !["version", "git", "registry"].iter().any(|key| spec.contains_key(*key));
    workspace || path_only
}

// The checks themselves, on synthetic input: each shows that its check reports a violation.
mod synthetic;
