//! `explain`: reads a Node and a Pod (files, stdin or the cluster) and prints what
//! [`nlc_core::explain`] decides for them.

use std::io::Read as _;

use clap::{Args, ValueEnum};
use k8s_openapi::api::core::v1::{Node, Pod};
use nlc_core::explain::{explain, parse_manifest, render_text};
use nlc_core::taints::MatchOptions;

use crate::error::Result;
use crate::runtime::args::ClientArgs;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Text,
    Json,
}

#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// A Node manifest (YAML or JSON; `-` for stdin), or with --from-cluster a node name.
    #[arg(long)]
    pub node: String,
    /// A Pod manifest (YAML or JSON; `-` for stdin), or with --from-cluster `namespace/name`.
    #[arg(long)]
    pub pod: String,
    /// Read the node and the pod from the cluster instead of files.
    #[arg(long)]
    pub from_cluster: bool,
    /// Honour the `Lt` / `Gt` toleration operators (feature gate
    /// TaintTolerationComparisonOperators, off by default upstream).
    #[arg(long)]
    pub enable_comparison_operators: bool,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value = "text")]
    pub output: OutputFormat,
    #[command(flatten)]
    pub client: ClientArgs,
}

fn input(source_name: &str, problem: impl ToString) -> crate::Error {
    nlc_core::Error::Input { source_name: source_name.to_owned(), problem: problem.to_string() }.into()
}

pub async fn run(args: ExplainArgs) -> Result<()> {
    let ExplainArgs { node, pod, from_cluster, enable_comparison_operators, output, client } = args;
    let (node, pod) = if from_cluster {
        from_cluster_objects(crate::runtime::client::client(&client).await?, &node, &pod).await?
    } else {
        if node == "-" && pod == "-" {
            return Err(input("--node, --pod", "cannot both read stdin"));
        }
        (read_manifest(&node, "Node")?, read_manifest(&pod, "Pod")?)
    };
    let opts = MatchOptions { comparison_operators: enable_comparison_operators };
    let e = explain(&node, &pod, opts, jiff::Timestamp::now());
    match output {
        OutputFormat::Text => print!("{}", render_text(&e)),
        OutputFormat::Json => {
            let json = serde_json::to_string_pretty(&e).map_err(|e| input("output", e))?;
            println!("{json}");
        }
    }
    Ok(())
}

/// Reads a manifest of kind `kind` from a file (`-` for stdin), YAML or JSON. Every failure
/// names the file and the problem on one line.
pub fn read_manifest<K: serde::de::DeserializeOwned>(path: &str, kind: &str) -> Result<K> {
    let (name, text) = if path == "-" {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s).map_err(|e| input("<stdin>", e))?;
        ("<stdin>".to_owned(), s)
    } else {
        (path.to_owned(), std::fs::read_to_string(path).map_err(|e| input(path, e))?)
    };
    Ok(parse_manifest(&name, &text, kind)?)
}

/// Reads the node and the pod (`namespace/name`, or `name` in `default`) from the cluster.
pub async fn from_cluster_objects(client: kube::Client, node: &str, pod: &str) -> Result<(Node, Pod)> {
    let (ns, name) = pod.split_once('/').unwrap_or(("default", pod));
    let nodes: kube::Api<Node> = kube::Api::all(client.clone());
    let pods: kube::Api<Pod> = kube::Api::namespaced(client, ns);
    let node = nodes.get(node).await.map_err(|e| input(&format!("node {node}"), e))?;
    let pod = pods.get(name).await.map_err(|e| input(&format!("pod {ns}/{name}"), e))?;
    Ok((node, pod))
}
