//! The documentation cannot drift from the code unnoticed.
//!
//! Why: the README grew to 137 KB because every change added a paragraph and nothing pushed
//! back, and its settings table restated `conf_schema.json` with defaults the schema had since
//! changed. Now the settings page is generated from the schema, the README is a short first
//! page, and the rest lives in `docs/`. These tests keep it so:
//! - `docs/configuration.md` is exactly what `scripts/gen-config-docs.py` renders from
//!   `conf_schema.json` (run the script after changing the schema);
//! - the README stays under 20,000 bytes and opens with `make run` and `make test` (within
//!   its first 40 lines, where a CI hook looks for them);
//! - every relative link in README.md and docs/*.md points at a file that exists, so moving or
//!   renaming a page cannot leave dead links behind.

use std::path::{Path, PathBuf};
use std::process::Command;

const README_MAX_BYTES: usize = 20_000;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn configuration_page_is_what_the_schema_generates() {
    let out = Command::new("python3")
        .arg("scripts/gen-config-docs.py")
        .arg("--check")
        .current_dir(repo())
        .output()
        .expect("run python3 scripts/gen-config-docs.py --check");
    assert!(
        out.status.success(),
        "docs/configuration.md is out of date with conf_schema.json \
         (run `python3 scripts/gen-config-docs.py`):\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn readme_is_short_and_opens_with_the_two_commands() {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("read README.md");
    assert!(
        readme.len() <= README_MAX_BYTES,
        "README.md is {} bytes, more than {README_MAX_BYTES}: move details into docs/",
        readme.len()
    );
    let head: Vec<&str> = readme.lines().take(40).collect();
    for command in ["make run", "make test"] {
        assert!(
            head.iter().any(|line| line.contains(command)),
            "README.md does not name `{command}` in its first 40 lines"
        );
    }
}

#[test]
fn relative_links_in_readme_and_docs_point_at_files_that_exist() {
    let root = repo();
    let mut pages = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("read docs/")
        .map(|e| e.expect("docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    assert!(!docs.is_empty(), "docs/ holds no Markdown page");
    pages.extend(docs);

    let mut dead = Vec::new();
    let (mut checked, mut anchors_checked) = (0, 0);
    for page in &pages {
        let text = std::fs::read_to_string(page).expect("read a Markdown page");
        for target in link_targets(&text) {
            let anchor = target.split_once('#').map(|(_, a)| a);
            let resolved = match relative_path(&target) {
                Some(path) => page.parent().unwrap_or(Path::new(".")).join(path),
                // An anchor on the same page.
                None if target.starts_with('#') => page.clone(),
                None => continue,
            };
            checked += 1;
            let shown = page.strip_prefix(&root).unwrap_or(page).display();
            if !resolved.exists() {
                dead.push(format!("{shown}: ({target}): no such file"));
                continue;
            }
            let Some(anchor) = anchor.filter(|_| resolved.extension().is_some_and(|x| x == "md"))
            else {
                continue;
            };
            anchors_checked += 1;
            let heads = heading_anchors(&std::fs::read_to_string(&resolved).unwrap_or_default());
            if !heads.contains(anchor) {
                dead.push(format!("{shown}: ({target}): no heading has that anchor"));
            }
        }
    }
    assert!(
        checked > 0 && anchors_checked > 0,
        "no relative link or anchor found: the link parser is broken"
    );
    assert!(
        dead.is_empty(),
        "links to files or headings that do not exist:\n{}",
        dead.join("\n")
    );
}

/// The anchors GitHub gives a page's headings: the heading text lowercased, without
/// punctuation (letters of every script, digits, `-` and `_` stay), spaces made `-`; the
/// second heading with one slug gets `-1`, the third `-2`.
fn heading_anchors(markdown: &str) -> std::collections::HashSet<String> {
    let mut seen: std::collections::HashMap<String, usize> = Default::default();
    let mut anchors = std::collections::HashSet::new();
    let mut fenced = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if fenced || !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let text = line[hashes..].trim().trim_end_matches('#').trim();
        let slug: String = text
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect();
        let n = seen.entry(slug.clone()).or_insert(0);
        anchors.insert(match *n {
            0 => slug,
            k => format!("{slug}-{k}"),
        });
        *n += 1;
    }
    anchors
}

#[test]
fn heading_anchors_are_githubs() {
    let page = "# scopemem\n## 5.13 Working memory\n### 8a. HTTP, MCP and the LLM tools\n\
                ```sh\n# not a heading\n```\n## `make test` 失败时\n## Notes\n## Notes\n";
    let mut got: Vec<String> = heading_anchors(page).into_iter().collect();
    got.sort();
    assert_eq!(
        got,
        [
            "513-working-memory",
            "8a-http-mcp-and-the-llm-tools",
            "make-test-失败时",
            "notes",
            "notes-1",
            "scopemem"
        ]
    );
}

/// The file part of a link target that points into the repository, or `None` for a URL, a
/// mail address or an anchor on the same page.
fn relative_path(target: &str) -> Option<&str> {
    let path = target.split('#').next().unwrap_or("");
    let has_scheme = path.split_once(':').is_some_and(|(scheme, _)| {
        !scheme.is_empty() && scheme.chars().all(|c| c.is_ascii_alphabetic())
    });
    (!path.is_empty() && !has_scheme && !path.starts_with('/')).then_some(path)
}

/// The targets of the inline links and images (`[text](target)`, `![alt](target)`) of a
/// Markdown page, outside fenced code blocks and code spans.
fn link_targets(markdown: &str) -> Vec<String> {
    let mut prose = String::new();
    let mut fenced = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            prose.push_str(line);
            prose.push('\n');
        }
    }
    let prose = without_code_spans(&prose);
    let mut targets = Vec::new();
    let mut rest = prose.as_str();
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        let end = rest.find(')').unwrap_or(rest.len());
        let inside = rest[..end].trim();
        // `(path "title")`: the target is what comes before the title.
        if let Some(target) = inside.split_whitespace().next() {
            targets.push(target.trim_matches(|c| c == '<' || c == '>').to_string());
        }
        rest = &rest[end..];
    }
    targets
}

/// `text` with every code span removed: a run of N backticks opens one, and the next run of
/// exactly N backticks closes it (CommonMark); an unclosed run is kept as text.
fn without_code_spans(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let run_at = |i: usize| chars[i..].iter().take_while(|&&c| c == '`').count();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '`' {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let open = run_at(i);
        let mut j = i + open;
        let mut close = None;
        while j < chars.len() {
            if chars[j] == '`' {
                let run = run_at(j);
                if run == open {
                    close = Some(j + run);
                    break;
                }
                j += run;
            } else {
                j += 1;
            }
        }
        match close {
            Some(after) => i = after,
            None => {
                out.push_str(&"`".repeat(open));
                i += open;
            }
        }
    }
    out
}

#[test]
fn the_link_parser_skips_code_and_urls() {
    let page = "See [a](a.md#x), ![b](img/b.png \"t\") and [c](https://x.org).\n\
                `[not](code.md)` and ``[nor](this.md) ` here``\n\
                ```sh\n[neither](fenced.md)\n```\n[same page](#anchor)\n";
    let targets = link_targets(page);
    assert_eq!(
        targets,
        ["a.md#x", "img/b.png", "https://x.org", "#anchor"],
        "parsed targets"
    );
    let files: Vec<&str> = targets.iter().filter_map(|t| relative_path(t)).collect();
    assert_eq!(files, ["a.md", "img/b.png"]);
}

/// docs/design.md section 4 is the map of `src/`: every module file is named there (as
/// `file.rs`, or through a folder below its layer, `feedback/`), and so is every such folder.
/// A module added without a line in the map fails here.
#[test]
fn design_section_4_names_every_module() {
    let root = repo();
    let design = std::fs::read_to_string(root.join("docs/design.md")).expect("read design.md");
    let start = design.find("## 4. Layers").expect("section 4");
    let end = design[start..]
        .find("\n## 5.")
        .map_or(design.len(), |e| start + e);
    let map = &design[start..end];
    let mut missing = Vec::new();
    let mut seen = 0;
    let mut stack = vec![root.join("src")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read src/") {
            let path = entry.expect("src/ entry").path();
            let rel = path.strip_prefix(root.join("src")).unwrap().to_path_buf();
            let parts: Vec<String> = rel
                .iter()
                .map(|p| p.to_string_lossy().into_owned())
                .collect();
            let name = parts.last().cloned().unwrap_or_default();
            // Folders below a layer (and the files in them) may be named by the folder.
            let below_layer = parts.get(1..parts.len().saturating_sub(1)).unwrap_or(&[]);
            let by_folder = below_layer.iter().any(|p| map.contains(&format!("{p}/")));
            if path.is_dir() {
                stack.push(path.clone());
                if parts.len() > 1 && !by_folder && !map.contains(&format!("{name}/")) {
                    missing.push(format!("{}/", rel.display()));
                }
                continue;
            }
            if !name.ends_with(".rs") || ["lib.rs", "main.rs", "mod.rs"].contains(&name.as_str()) {
                continue;
            }
            seen += 1;
            if !by_folder && !map.contains(&name) {
                missing.push(rel.display().to_string());
            }
        }
    }
    assert!(
        seen > 50,
        "walked only {seen} module files: the walk is broken"
    );
    missing.sort();
    assert!(
        missing.is_empty(),
        "docs/design.md section 4 does not name these modules of src/:\n{}",
        missing.join("\n")
    );
}
