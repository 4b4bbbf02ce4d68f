//! The code's shape rules, checked on every `make test` rather than in review.
//!
//! Why: the layering (lower layers never import higher ones) and "the scope rule is written
//! once" are easy to break and invisible in a diff. Both were broken before: `embed` imported
//! `store`, and a forget formatted its own copy of the public-plus-NULL rule beside
//! `store/filter.rs`. These tests fail on the next such edit:
//! - `scripts/import-graph.py --check` finds no upward edge and no cycle in either crate, with
//!   the layer order config < scope < embed < store < migrate < memory < transfer < host < api
//!   (config and scope, with redaction, the fact folding and the time words below them, are the
//!   lance-free crates/core, which cannot import the service crate at all);
//! - no SQL predicate on `memory_scope` or `conversation_id` is formatted outside
//!   `src/store/filter.rs` (the `RowFilter` and `Selection` every read, delete and export
//!   uses), in either crate;
//! - no code outside the store, the schema migrations and `src/memory/door/` hands rows to the
//!   table's writer (issue 76): every memory row goes through the write door, which applies the
//!   table of writers in design section 2;
//! - a `pub fn` of the service crate is one that `main.rs`, a bench or an integration test
//!   names: everything else is `pub(crate)` (issue 61; 369 `pub fn`s were 148 once the
//!   compiler said which were needed), and those are the list in docs/public-surface.md.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn the_layers_import_only_downward_with_embed_below_store() {
    let out = Command::new("python3")
        .args(["scripts/import-graph.py", "--check"])
        .current_dir(repo())
        .output()
        .expect("run python3 scripts/import-graph.py --check");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "an upward import or a cycle:\n{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("config < scope < embed < store < migrate"),
        "the layer order changed:\n{text}"
    );
    assert!(
        text.contains("upward edges") && text.contains(": 0"),
        "{text}"
    );
}

/// SQL on these columns, as code writes it: a literal column name followed by an operator, or
/// the column constant interpolated into a format string.
const PREDICATE_STARTS: [&str; 4] = [
    "memory_scope",
    "conversation_id",
    "{COL_MEMORY_SCOPE}",
    "{COL_CONVERSATION_ID}",
];
const OPERATORS: [&str; 4] = [" = ", " IN ", " IS ", " <> "];

/// `path:line: text` for each line of non-test code in `file` that formats a predicate on the
/// scope or conversation columns inside a string literal.
fn hand_formatted(file: &Path, shown: &str) -> Vec<String> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let mut found = Vec::new();
    for (n, line) in text.lines().enumerate() {
        // Unit tests sit at the end of a file; what they assert is the code's output.
        if line.trim_start().starts_with("#[cfg(test)]") {
            break;
        }
        if line.trim_start().starts_with("//") {
            continue;
        }
        for start in PREDICATE_STARTS {
            for (at, _) in line.match_indices(start) {
                let in_string = line[..at].matches('"').count() % 2 == 1;
                let rest = &line[at + start.len()..];
                if in_string && OPERATORS.iter().any(|op| rest.starts_with(op)) {
                    found.push(format!("{shown}:{}: {}", n + 1, line.trim()));
                }
            }
        }
    }
    found
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_scope_or_conversation_predicate_is_formatted_outside_the_filter() {
    let src = repo().join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    rust_files(&repo().join("crates").join("core").join("src"), &mut files);
    assert!(files.len() > 50, "found only {} source files", files.len());
    let filter = src.join("store").join("filter.rs");
    assert!(
        !hand_formatted(&filter, "filter.rs").is_empty(),
        "the check finds nothing even in store/filter.rs: it is broken"
    );
    let found: Vec<String> = files
        .iter()
        .filter(|f| **f != filter)
        .flat_map(|f| {
            let shown = f.strip_prefix(repo()).unwrap_or(f).display().to_string();
            hand_formatted(f, &shown)
        })
        .collect();
    assert!(
        found.is_empty(),
        "build these predicates with store::filter (RowFilter, Selection, ScopeSet):\n{}",
        found.join("\n")
    );
}

/// The calls that add or replace rows of the table, as the store's writer is called.
const ROW_WRITES: [&str; 6] = [
    ".insert_missing(",
    ".replace_erasing(",
    ".append_once(",
    "store.append(",
    ".store().append(",
    "writer().append(",
];

/// `path:line: text` for each line of non-test code in `file` that hands rows to the writer.
fn row_writes(file: &Path, shown: &str) -> Vec<String> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let mut found = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("#[cfg(test)]") {
            break;
        }
        if line.trim_start().starts_with("//") {
            continue;
        }
        if ROW_WRITES.iter().any(|w| line.contains(w)) {
            found.push(format!("{shown}:{}: {}", n + 1, line.trim()));
        }
    }
    found
}

#[test]
fn memory_rows_reach_the_table_only_through_the_write_door() {
    let src = repo().join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let door = src.join("memory").join("door");
    let below = [src.join("store"), src.join("migrate"), door.clone()];
    let in_door: Vec<String> = files
        .iter()
        .filter(|f| f.starts_with(&door))
        .flat_map(|f| row_writes(f, "door"))
        .collect();
    assert!(
        in_door.len() >= 3,
        "the check finds no write even in src/memory/door: it is broken ({in_door:?})"
    );
    let found: Vec<String> = files
        .iter()
        .filter(|f| !below.iter().any(|b| f.starts_with(b)))
        .flat_map(|f| {
            let shown = f.strip_prefix(repo()).unwrap_or(f).display().to_string();
            row_writes(f, &shown)
        })
        .collect();
    assert!(
        found.is_empty(),
        "write memory rows through memory::door (an Admitted row), not the store's writer:\n{}",
        found.join("\n")
    );
}

/// The names of the `pub fn`s of a source file, up to its unit tests.
fn pub_fns(file: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    text.lines()
        .take_while(|l| !l.trim_start().starts_with("mod tests"))
        .filter_map(pub_fns_of_line)
        .collect()
}

/// Whether `text` names the function `name` where a function is named: called (`name(`,
/// `name::<`), as a path's last segment (`::name`) or as a method (`.name`).
fn names(text: &str, name: &str) -> bool {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    text.match_indices(name).any(|(at, _)| {
        let before = &text[..at];
        let after = &text[at + name.len()..];
        if before.chars().next_back().is_some_and(ident) || after.chars().next().is_some_and(ident)
        {
            return false;
        }
        let after = after.trim_start();
        before.ends_with("::")
            || before.ends_with('.')
            || after.starts_with('(')
            || after.starts_with("::<")
    })
}

#[test]
fn a_function_is_pub_only_when_the_binary_a_bench_or_a_test_names_it() {
    let src = repo().join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let main = src.join("main.rs");
    let mut outside = std::fs::read_to_string(&main).unwrap_or_default();
    let mut users = Vec::new();
    rust_files(&repo().join("tests"), &mut users);
    rust_files(&repo().join("benches"), &mut users);
    for f in &users {
        outside.push_str(&std::fs::read_to_string(f).unwrap_or_default());
    }
    assert!(
        users.len() > 20,
        "found only {} tests and benches",
        users.len()
    );
    let mut public = 0;
    let mut needless = Vec::new();
    for f in files.iter().filter(|f| **f != main) {
        for name in pub_fns(f) {
            public += 1;
            if !names(&outside, &name) {
                let shown = f.strip_prefix(repo()).unwrap_or(f).display().to_string();
                needless.push(format!("{shown}: fn {name}"));
            }
        }
    }
    assert!(
        public > 50,
        "found only {public} pub fns: the check is broken"
    );
    assert!(
        needless.is_empty(),
        "pub, but no binary, bench or integration test names them; make them pub(crate) \
         (design §4):\n{}",
        needless.join("\n")
    );
}

/// The type an `impl` line opens a block for: `impl<T> Foo<T> {` and `impl Bar for Foo {` are
/// both `Foo`.
fn impl_target(line: &str) -> Option<String> {
    let mut rest = line.strip_prefix("impl")?;
    if rest.starts_with('<') {
        let mut depth = 0;
        let end = rest.char_indices().find_map(|(i, c)| {
            match c {
                '<' => depth += 1,
                '>' => depth -= 1,
                _ => {}
            }
            (depth == 0).then_some(i + 1)
        })?;
        rest = &rest[end..];
    } else if !rest.starts_with(' ') {
        return None;
    }
    let rest = rest.rsplit(" for ").next().unwrap_or(rest).trim_start();
    Some(
        rest.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
            .collect(),
    )
}

/// Every `pub fn` of the service crate as `module::Type::name` (or `module::name`), in file
/// order, files sorted by path.
fn public_surface() -> Vec<String> {
    let src = repo().join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut surface = Vec::new();
    for f in files.iter().filter(|f| **f != src.join("main.rs")) {
        let rel = f.strip_prefix(&src).unwrap_or(f).with_extension("");
        let mut parts: Vec<String> = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
            parts.pop();
        }
        let module = parts.join("::");
        let text = std::fs::read_to_string(f).unwrap_or_default();
        let mut container = String::new();
        for line in text.lines() {
            if line.trim_start().starts_with("mod tests") {
                break;
            }
            if !line.starts_with(char::is_whitespace) && !line.is_empty() {
                if let Some(target) = impl_target(line) {
                    container = target;
                } else if line.trim_end().ends_with('{') {
                    container = line.trim_end().trim_end_matches('{').trim().to_string();
                }
            }
            if let Some(name) = pub_fns_of_line(line) {
                let at = if line.starts_with(char::is_whitespace) {
                    format!("{container}::")
                } else {
                    String::new()
                };
                let module = if module.is_empty() {
                    String::new()
                } else {
                    format!("{module}::")
                };
                surface.push(format!("{module}{at}{name}"));
            }
        }
    }
    surface
}

/// The name of the `pub fn` a line declares, if it declares one.
fn pub_fns_of_line(line: &str) -> Option<String> {
    let mut rest = line.trim_start().strip_prefix("pub ")?;
    for qualifier in ["async ", "const ", "unsafe "] {
        rest = rest.strip_prefix(qualifier).unwrap_or(rest);
    }
    let rest = rest.strip_prefix("fn ")?;
    Some(
        rest.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect(),
    )
}

/// The list in docs/public-surface.md: the lines of its one code block.
fn listed_surface(doc: &str) -> Vec<String> {
    doc.split("```")
        .nth(1)
        .unwrap_or_default()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

#[test]
fn the_public_surface_is_the_list_in_docs() {
    let path = repo().join("docs").join("public-surface.md");
    let doc = std::fs::read_to_string(&path).unwrap_or_default();
    let found = public_surface();
    assert!(found.len() > 50, "found only {} pub fns", found.len());
    let listed = listed_surface(&doc);
    if found == listed {
        return;
    }
    if std::env::var_os("SCOPEMEM_BLESS").is_some_and(|v| v == "1") {
        let head = doc.split("```").next().unwrap_or_default();
        let tail = doc.split("```").nth(2).unwrap_or("\n");
        std::fs::write(&path, format!("{head}```\n{}\n```{tail}", found.join("\n")))
            .expect("write docs/public-surface.md");
        return;
    }
    let added: Vec<&String> = found.iter().filter(|f| !listed.contains(f)).collect();
    let removed: Vec<&String> = listed.iter().filter(|l| !found.contains(l)).collect();
    panic!(
        "the crate's pub fns differ from docs/public-surface.md (design §4).\nnew: {added:?}\n\
         gone: {removed:?}\nMake a new one pub(crate) unless main.rs, a bench or an integration \
         test needs it; then list it with `SCOPEMEM_BLESS=1 cargo test --test it shape::`"
    );
}
