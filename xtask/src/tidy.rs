//! Workspace invariants, checked by plain `#[test]`s so that `cargo test --workspace` enforces
//! them (rust-analyzer's `tidy.rs` convention).
//!
//! Each check is a pure function over the `cargo metadata` graph or a manifest's text, and has
//! unit tests on synthetic input showing that it reports a violation: a check that cannot fail
//! proves nothing.

use std::{
    collections::{BTreeMap, BTreeSet, VecDeque},
    fs,
    path::PathBuf,
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

/// The metrics exporter, which only [`METRICS`] may name.
const EXPORTER: &str = "metrics-exporter-prometheus";

/// The workspace crates a workspace crate may depend on (normal and build dependencies; dev-
/// dependencies excepted), by the prefix of its name: the arrows ARCHITECTURE.md draws. Crates
/// not listed (the server, bench, xtask) may depend on any.
const ARROWS: &[(&str, &[&str])] = &[
    ("ironbus-store-", &[CORE]),
    ("ironbus-transport-", &[CORE]),
    (METRICS, &[CORE, "ironbus-transport-amqp", "ironbus-transport-http"]),
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
        "stores and transports may depend on no workspace crate but {CORE}, and {METRICS} on \
         no other but the transports (dev-dependencies excepted):\n  {}",
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
        found.extend(unpinned_dependencies(&text).into_iter().map(|dep| format!("{shown}: {dep}")));
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

/// Where a manifest line sits.
enum Section {
    /// `[dependencies]` and the like, including `[target.'cfg(..)'.dependencies]`.
    Deps(String),
    /// `[dependencies.name]`: a single dependency as its own table.
    Dep(String, String),
    Other,
}

/// The dependencies a member manifest declares with their own version, git or registry
/// source instead of `workspace = true`; path-only dependencies are accepted.
///
/// A line-based reading of the TOML forms manifests use: `name = "1"`, inline tables (which may
/// span lines through multi-line arrays), dotted keys (`name.workspace = true`) and
/// `[dependencies.name]` tables, in every dependency table, platform-specific ones included.
fn unpinned_dependencies(manifest: &str) -> Vec<String> {
    // (table, dependency) → its keys and values, in order of appearance.
    let mut decls: BTreeMap<(String, String), Vec<(String, String)>> = BTreeMap::new();
    let mut section = Section::Other;
    let mut lines = manifest.lines();
    while let Some(line) = lines.next() {
        let mut statement = strip_comment(line).trim().to_owned();
        if statement.is_empty() {
            continue;
        }
        if statement.starts_with('[') {
            section = parse_header(&statement);
            continue;
        }
        while nesting(&statement) > 0 {
            let Some(next) = lines.next() else { break };
            statement.push(' ');
            statement.push_str(strip_comment(next).trim());
        }
        let Some((key, value)) = split_once_outside_quotes(&statement, '=') else { continue };
        let key = split_dotted(key);
        let value = value.trim();
        match &section {
            Section::Deps(table) => {
                let entries = decls.entry((table.clone(), key[0].clone())).or_default();
                if key.len() > 1 {
                    entries.push((key[1..].join("."), value.to_owned()));
                } else if let Some(inner) =
                    value.strip_prefix('{').and_then(|v| v.strip_suffix('}'))
                {
                    entries.extend(inline_table(inner));
                } else {
                    // `name = "1"` is short for `name = { version = "1" }`.
                    entries.push(("version".to_owned(), value.to_owned()));
                }
            }
            Section::Dep(table, name) => {
                let entries = decls.entry((table.clone(), name.clone())).or_default();
                entries.push((key.join("."), value.to_owned()));
            }
            Section::Other => {}
        }
    }
    decls
        .into_iter()
        .filter(|(_, entries)| !is_pinned_by_workspace(entries))
        .map(|((table, name), entries)| {
            let entries: Vec<String> = entries.iter().map(|(k, v)| format!("{k} = {v}")).collect();
            format!("[{table}] {name} = {{ {} }}", entries.join(", "))
        })
        .collect()
}

fn is_pinned_by_workspace(entries: &[(String, String)]) -> bool {
    let has = |key: &str| entries.iter().any(|(k, _)| k == key);
    let workspace = entries.iter().any(|(k, v)| k == "workspace" && v == "true");
    let path_only = has("path") && !has("version") && !has("git") && !has("registry");
    workspace || path_only
}

fn parse_header(header: &str) -> Section {
    let inner = header.trim_start_matches('[').trim_end_matches(']');
    let segments = split_dotted(inner);
    // `[workspace.dependencies]` is where versions belong; `[[bin]]` and such are not deps.
    if header.starts_with("[[") || segments[0] == "workspace" {
        return Section::Other;
    }
    let at = match segments.as_slice() {
        [first, ..] if DEP_TABLES.contains(&first.as_str()) => 0,
        [target, _, table, ..] if target == "target" && DEP_TABLES.contains(&table.as_str()) => 2,
        _ => return Section::Other,
    };
    let table = segments[..=at].join(".");
    match &segments[at + 1..] {
        [] => Section::Deps(table),
        [name] => Section::Dep(table, name.clone()),
        _ => Section::Other,
    }
}

/// `key = value` pairs of an inline table's inside, split at top-level commas.
fn inline_table(inner: &str) -> Vec<(String, String)> {
    let mut entries = Vec::new();
    let mut rest = inner;
    loop {
        let (entry, tail) = match split_once_outside_quotes(rest, ',') {
            Some((entry, tail)) => (entry, Some(tail)),
            None => (rest, None),
        };
        if let Some((key, value)) = split_once_outside_quotes(entry, '=') {
            entries.push((split_dotted(key).join("."), value.trim().to_owned()));
        }
        match tail {
            Some(tail) => rest = tail,
            None => return entries,
        }
    }
}

/// Splits at the first `separator` outside strings and brackets.
fn split_once_outside_quotes(text: &str, separator: char) -> Option<(&str, &str)> {
    let at = scan(text).find(|&(_, c, depth)| c == separator && depth == 0)?.0;
    Some((&text[..at], &text[at + separator.len_utf8()..]))
}

/// A dotted key or header, split into its unquoted, trimmed parts: `target.'cfg(unix)'.x`.
fn split_dotted(key: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut rest = key;
    loop {
        let (part, tail) = match split_once_outside_quotes(rest, '.') {
            Some((part, tail)) => (part, Some(tail)),
            None => (rest, None),
        };
        parts.push(part.trim().trim_matches(|c| c == '"' || c == '\'').to_owned());
        match tail {
            Some(tail) => rest = tail,
            None => return parts,
        }
    }
}

/// Open brackets minus closed ones outside strings: above zero, the value continues.
fn nesting(text: &str) -> i32 {
    scan(text)
        .map(|(_, c, _)| match c {
            '[' | '{' => 1,
            ']' | '}' => -1,
            _ => 0,
        })
        .sum()
}

fn strip_comment(line: &str) -> &str {
    match scan(line).find(|&(_, c, _)| c == '#') {
        Some((at, ..)) => &line[..at],
        None => line,
    }
}

/// The characters of `text` outside strings, with their byte offset and the bracket depth
/// before them.
fn scan(text: &str) -> impl Iterator<Item = (usize, char, i32)> + '_ {
    let mut quote: Option<char> = None;
    let mut escaped = false;
    let mut depth = 0;
    text.char_indices().filter_map(move |(at, c)| {
        if let Some(open) = quote {
            if escaped {
                escaped = false;
            } else if c == '\\' && open == '"' {
                escaped = true;
            } else if c == open {
                quote = None;
            }
            return None;
        }
        if c == '"' || c == '\'' {
            quote = Some(c);
            return None;
        }
        let before = depth;
        match c {
            '[' | '{' => depth += 1,
            ']' | '}' => depth -= 1,
            _ => {}
        }
        Some((at, c, before))
    })
}

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
    assert_eq!(unpinned_dependencies(manifest), Vec::<String>::new());
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
        unpinned_dependencies(manifest),
        [
            r#"[build-dependencies] cc = { version = "1" }"#,
            r#"[dependencies] dotted = { version = "2" }"#,
            r#"[dependencies] local = { path = "../local", version = "0.1" }"#,
            r#"[dependencies] rand = { version = "0.8", optional = true }"#,
            r#"[dependencies] remote = { git = "https://example.com/remote.git" }"#,
            r#"[dependencies] serde = { version = "1" }"#,
            r#"[dev-dependencies] proptest = { version = "1" }"#,
            r#"[target.cfg(windows).dependencies] winapi = { version = "0.3", features = [ "winbase", ] }"#,
        ]
    );
}
