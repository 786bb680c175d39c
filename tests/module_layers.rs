//! The house's layering rule (docs/architecture.md, "Layers"): between two modules with the same
//! parent, references go one way. A module may use its parent's items and its children's (that
//! is Rust's own shape: a parent declares its children, a child reaches back with `super`), but
//! two siblings that use each other are one module in two files, and every such cycle makes the
//! next reader trace both to understand either. Checked in every crate of the workspace, from
//! the source as rustc would read it (`syn`): `use` trees, paths in code and types, and `crate::`
//! and `super::` paths inside macro calls; test-only modules and items (`#[cfg(test)]`) are left
//! out. `make lint` runs this test alone.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::Visit;

type ModPath = Vec<String>;

/// A reference from one module to another, with where it was written.
struct Reference {
    from: ModPath,
    to: Vec<String>,
    file: PathBuf,
}

struct Crate {
    modules: BTreeSet<ModPath>,
    references: Vec<Reference>,
}

fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs
        .iter()
        .any(|a| a.path().is_ident("cfg") && a.meta.require_list().is_ok_and(|l| l.tokens.to_string().trim() == "test"))
}

/// Reads a crate from its root file, following `mod` declarations as rustc does.
fn read_crate(root: &Path) -> Crate {
    let mut krate = Crate { modules: BTreeSet::new(), references: Vec::new() };
    let dir = root.parent().expect("a crate root has a directory").to_path_buf();
    read_module(&mut krate, root, dir, Vec::new());
    krate
}

/// Reads the module in `file` at `path`; its out-of-line children live under `dir`.
fn read_module(krate: &mut Crate, file: &Path, dir: PathBuf, path: ModPath) {
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let ast = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    krate.modules.insert(path.clone());
    let mut walker = Walker { path: path.clone(), refs: Vec::new(), children: Vec::new() };
    for item in &ast.items {
        walker.visit_item(item);
    }
    for r in walker.refs {
        krate.references.push(Reference { from: r.0, to: r.1, file: file.to_path_buf() });
    }
    for (inline_parent, name) in walker.children {
        let mut child = inline_parent.clone();
        child.push(name.clone());
        // Out-of-line children of inline modules are not used here.
        assert_eq!(inline_parent, path, "{}: an out-of-line module inside an inline one", file.display());
        let (a, b) = (dir.join(format!("{name}.rs")), dir.join(&name).join("mod.rs"));
        let (child_file, child_dir) = if a.exists() { (a, dir.join(&name)) } else { (b, dir.join(&name)) };
        read_module(krate, &child_file, child_dir, child);
    }
}

/// One file's references and its out-of-line child modules.
struct Walker {
    path: ModPath,
    refs: Vec<(ModPath, Vec<String>)>,
    children: Vec<(ModPath, String)>,
}

impl Walker {
    /// Resolves a path written in the current module to an absolute one, when it starts with
    /// `crate`, `self` or `super` (other paths name extern crates, preludes or local items).
    fn resolve(&self, segments: &[String]) -> Option<Vec<String>> {
        let mut at = self.path.clone();
        let mut rest = segments;
        match rest.first().map(String::as_str) {
            Some("crate") => {
                at.clear();
                rest = &rest[1..];
            }
            Some("self") => rest = &rest[1..],
            Some("super") => {
                while rest.first().map(String::as_str) == Some("super") {
                    at.pop()?;
                    rest = &rest[1..];
                }
            }
            _ => return None,
        }
        at.extend(rest.iter().cloned());
        Some(at)
    }

    fn record(&mut self, segments: &[String]) {
        if let Some(to) = self.resolve(segments) {
            self.refs.push((self.path.clone(), to));
        }
    }

    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                prefix.push(n.ident.to_string());
                self.record(&prefix.clone());
                prefix.pop();
            }
            syn::UseTree::Rename(r) => {
                prefix.push(r.ident.to_string());
                self.record(&prefix.clone());
                prefix.pop();
            }
            syn::UseTree::Glob(_) => self.record(&prefix.clone()),
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(prefix, t);
                }
            }
        }
    }

    /// `crate::a::b` and `super::a` sequences in a macro call's tokens.
    fn macro_tokens(&mut self, tokens: TokenStream) {
        let flat: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < flat.len() {
            match &flat[i] {
                TokenTree::Group(g) => self.macro_tokens(g.stream()),
                TokenTree::Ident(id) if id == "crate" || id == "super" => {
                    let mut segments = vec![id.to_string()];
                    let mut j = i + 1;
                    while let (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b)), Some(TokenTree::Ident(next))) =
                        (flat.get(j), flat.get(j + 1), flat.get(j + 2))
                    {
                        if a.as_char() != ':' || b.as_char() != ':' {
                            break;
                        }
                        segments.push(next.to_string());
                        j += 3;
                    }
                    self.record(&segments);
                    i = j;
                    continue;
                }
                _ => {}
            }
            i += 1;
        }
    }
}

impl<'ast> Visit<'ast> for Walker {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let attrs = match item {
            syn::Item::Const(i) => &i.attrs,
            syn::Item::Enum(i) => &i.attrs,
            syn::Item::Fn(i) => &i.attrs,
            syn::Item::Impl(i) => &i.attrs,
            syn::Item::Macro(i) => &i.attrs,
            syn::Item::Mod(i) => &i.attrs,
            syn::Item::Static(i) => &i.attrs,
            syn::Item::Struct(i) => &i.attrs,
            syn::Item::Trait(i) => &i.attrs,
            syn::Item::Type(i) => &i.attrs,
            syn::Item::Use(i) => &i.attrs,
            _ => return syn::visit::visit_item(self, item),
        };
        if !is_test_only(attrs) {
            syn::visit::visit_item(self, item);
        }
    }

    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        let name = m.ident.to_string();
        match &m.content {
            None => self.children.push((self.path.clone(), name)),
            Some((_, items)) => {
                self.path.push(name);
                for item in items {
                    self.visit_item(item);
                }
                self.path.pop();
            }
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        self.use_tree(&mut Vec::new(), &u.tree);
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        let segments: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
        self.record(&segments);
        syn::visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        self.macro_tokens(m.tokens.clone());
        syn::visit::visit_macro(self, m);
    }
}

/// The sibling edges of a crate: for each reference from `a` to a module `b` that is neither
/// its ancestor nor its descendant, the edge between the two children of their nearest common
/// ancestor, with the references that make it.
fn sibling_edges(krate: &Crate) -> BTreeMap<(ModPath, ModPath), Vec<String>> {
    let mut edges: BTreeMap<(ModPath, ModPath), Vec<String>> = BTreeMap::new();
    for r in &krate.references {
        // The module a path names: its longest prefix that is a module.
        let Some(target) = (0..=r.to.len()).rev().map(|n| r.to[..n].to_vec()).find(|p| krate.modules.contains(p))
        else {
            continue;
        };
        let common = r.from.iter().zip(&target).take_while(|(a, b)| a == b).count();
        if common == r.from.len() || common == target.len() {
            continue;
        }
        let (a, b) = (r.from[..=common].to_vec(), target[..=common].to_vec());
        edges.entry((a, b)).or_default().push(format!("{}: {}", r.file.display(), r.to.join("::")));
    }
    edges
}

/// Every cycle among siblings, as the strongly connected components of more than one module.
fn cycles(edges: &BTreeMap<(ModPath, ModPath), Vec<String>>) -> Vec<Vec<ModPath>> {
    let mut graph: BTreeMap<&ModPath, Vec<&ModPath>> = BTreeMap::new();
    for (a, b) in edges.keys() {
        graph.entry(a).or_default().push(b);
        graph.entry(b).or_default();
    }
    // Tarjan's algorithm.
    struct Tarjan<'g> {
        graph: &'g BTreeMap<&'g ModPath, Vec<&'g ModPath>>,
        index: BTreeMap<&'g ModPath, usize>,
        low: BTreeMap<&'g ModPath, usize>,
        stack: Vec<&'g ModPath>,
        on_stack: BTreeSet<&'g ModPath>,
        found: Vec<Vec<ModPath>>,
    }
    impl<'g> Tarjan<'g> {
        fn visit(&mut self, v: &'g ModPath) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for &w in &self.graph[v] {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(lw);
                } else if self.on_stack.contains(w) {
                    let iw = self.index[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.push(w.clone());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut t = Tarjan {
        graph: &graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !t.index.contains_key(v) {
            t.visit(v);
        }
    }
    t.found
}

fn report(name: &str, krate: &Crate) -> Vec<String> {
    let edges = sibling_edges(krate);
    let show = |p: &ModPath| if p.is_empty() { "crate".to_owned() } else { p.join("::") };
    cycles(&edges)
        .into_iter()
        .map(|component| {
            let mut s = format!("{name}: {} use each other", component.iter().map(show).collect::<Vec<_>>().join(", "));
            for ((a, b), why) in &edges {
                if component.contains(a) && component.contains(b) {
                    s.push_str(&format!("\n  {} -> {}: {}", show(a), show(b), why.join("; ")));
                }
            }
            s
        })
        .collect()
}

const CRATES: [(&str, &str); 4] = [
    ("node-lifecycle-controller", "src/lib.rs"),
    ("nlc-core", "core/src/lib.rs"),
    ("nlc-testenv", "testenv/src/lib.rs"),
    ("nlc-bench", "bench/src/main.rs"),
];

#[test]
fn no_two_sibling_modules_use_each_other() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    for (name, file) in CRATES {
        let krate = read_crate(&root.join(file));
        assert!(krate.modules.len() > 1, "{name}: no modules read from {file}");
        found.extend(report(name, &krate));
    }
    assert!(found.is_empty(), "module cycles (docs/architecture.md, \"Layers\"):\n{}", found.join("\n"));
}

/// The check itself: a cycle written into a scratch crate is found, with the references that
/// make it, and a child reaching its parent is not a cycle.
#[test]
fn a_cycle_between_siblings_is_found_and_a_child_using_its_parent_is_not() {
    let dir = std::env::temp_dir().join(format!("nlc-module-layers-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("b")).expect("scratch dir");
    let write = |p: &str, s: &str| std::fs::write(dir.join(p), s).expect("scratch file");
    write("lib.rs", "pub mod a;\npub mod b;\npub struct Root;\n#[cfg(test)]\nmod tests;\n");
    write("a.rs", "use crate::b::c::C;\npub struct A(pub C);\n");
    write("b.rs", "pub mod c;\npub fn f() -> crate::Root { crate::Root }\n");
    write(
        "b/c.rs",
        "pub struct C;\npub fn g() { let _ = format!(\"{:?}\", super::super::a::A(C).0 as *const C); super::f(); }\n",
    );
    write("tests.rs", "use crate::a::A;\n");
    let krate = read_crate(&dir.join("lib.rs"));
    let found = report("scratch", &krate);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].starts_with("scratch: a, b use each other"), "{}", found[0]);
    assert!(found[0].contains("a -> b:") && found[0].contains("a.rs: b::c::C"), "{}", found[0]);
    assert!(found[0].contains("b -> a:") && found[0].contains("c.rs: a::A"), "{}", found[0]);
}
