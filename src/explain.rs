//! `explain`: reads a Node and a Pod (files, stdin or the cluster) and prints what
//! [`nlc_core::explain`] decides for them; with `--admission`, what each admission plugin and
//! toleration rule would do to the pod ([`nlc_core::admission::explain`]).

use std::io::Read as _;

use clap::Args;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use nlc_core::admission::explain::{explain as admission_explain, render_text as admission_render};
use nlc_core::admission::restriction::RestrictionConfig;
use nlc_core::admission::toleration_rules::{RuleSet, TolerationRule};
use nlc_core::admission::{Context, NamespaceInfo, Plugins};
use nlc_core::default_tolerations::DefaultTolerationSeconds;
use nlc_core::explain::{parse_manifest, render_text};

use crate::error::Result;
use crate::runtime::args::ClientArgs;

pub(crate) use crate::output::OutputFormat;

#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// A Node manifest (YAML or JSON; `-` for stdin), or with --from-cluster a node name
    /// (not with --admission).
    #[arg(long, required_unless_present = "admission")]
    pub(crate) node: Option<String>,
    /// A Pod manifest (YAML or JSON; `-` for stdin), or with --from-cluster `namespace/name`.
    #[arg(long)]
    pub(crate) pod: String,
    /// Read the node and the pod from the cluster instead of files.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub(crate) from_cluster: bool,
    /// Honour the `Lt` / `Gt` toleration operators (feature gate
    /// TaintTolerationComparisonOperators, off by default upstream).
    #[arg(long, value_enum, default_value = "auto", num_args = 0..=1, require_equals = true, default_missing_value = "true", env = "NLC_ENABLE_COMPARISON_OPERATORS")]
    pub(crate) enable_comparison_operators: nlc_core::taints::ComparisonOperators,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value = "text")]
    pub(crate) output: OutputFormat,
    /// What the admission webhook's plugins (DefaultTolerationSeconds, PodTolerationRestriction,
    /// ExtendedResourceToleration, toleration rules) would do to the pod on CREATE, and why.
    /// The namespace and the rules come from --namespace-manifest and --rules, or with
    /// --from-cluster from the cluster.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub(crate) admission: bool,
    /// With --admission: the pod's Namespace manifest (its labels and annotations).
    #[arg(long, requires = "admission")]
    pub(crate) namespace_manifest: Option<String>,
    /// With --admission: TolerationRule manifests (YAML, several documents).
    #[arg(long, requires = "admission")]
    pub(crate) rules: Option<String>,
    /// With --admission: PodTolerationRestriction's cluster-wide Configuration file.
    #[arg(long, requires = "admission")]
    pub(crate) pod_toleration_restriction_config: Option<String>,
    #[command(flatten)]
    pub(crate) client: ClientArgs,
}

pub async fn run(args: ExplainArgs) -> Result<()> {
    let ExplainArgs {
        node,
        pod,
        from_cluster,
        enable_comparison_operators,
        output,
        admission,
        namespace_manifest,
        rules,
        pod_toleration_restriction_config,
        client,
    } = args;
    if admission {
        let sources = AdmissionSources { namespace_manifest, rules, restriction: pod_toleration_restriction_config };
        return run_admission(&pod, from_cluster, sources, output, &client).await;
    }
    let Some(node) = node else { return Err(crate::Error::input("--node", "is required")) };
    let mut policies = nlc_core::policy::Policies::default();
    let (node, pod) = if from_cluster {
        let client = crate::runtime::client::client(&client).await?;
        policies = crate::controller::policies::list(&client, &[]).await;
        from_cluster_objects(client, &node, &pod).await?
    } else {
        if node == "-" && pod == "-" {
            return Err(crate::Error::input("--node, --pod", "cannot both read stdin"));
        }
        (read_manifest(&node, "Node")?, read_manifest(&pod, "Pod")?)
    };
    let opts = enable_comparison_operators.options();
    let now = crate::clock::Clock::now(&crate::clock::SystemClock);
    let e = nlc_core::explain::explain_with(&node, &pod, opts, now, &policies, Default::default());
    match output {
        OutputFormat::Text => print!("{}", render_text(&e)),
        OutputFormat::Json => {
            let json = serde_json::to_string_pretty(&e).map_err(|e| crate::Error::input("output", e))?;
            println!("{json}");
        }
    }
    Ok(())
}

/// Reads a manifest of kind `kind` from a file (`-` for stdin), YAML or JSON. Every failure
/// names the file and the problem on one line.
pub(crate) fn read_manifest<K: serde::de::DeserializeOwned>(path: &str, kind: &str) -> Result<K> {
    let (name, text) = if path == "-" {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s).map_err(|e| crate::Error::input("<stdin>", e))?;
        ("<stdin>".to_owned(), s)
    } else {
        (path.to_owned(), std::fs::read_to_string(path).map_err(|e| crate::Error::input(path, e))?)
    };
    Ok(parse_manifest(&name, &text, kind)?)
}

/// Reads the node and the pod (`namespace/name`, or `name` in `default`) from the cluster.
pub(crate) async fn from_cluster_objects(client: kube::Client, node: &str, pod: &str) -> Result<(Node, Pod)> {
    let (ns, name) = pod.split_once('/').unwrap_or(("default", pod));
    let nodes: kube::Api<Node> = kube::Api::all(client.clone());
    let pods: kube::Api<Pod> = kube::Api::namespaced(client, ns);
    let node = nodes.get(node).await.map_err(|e| crate::Error::input(&format!("node {node}"), e))?;
    let pod = pods.get(name).await.map_err(|e| crate::Error::input(&format!("pod {ns}/{name}"), e))?;
    Ok((node, pod))
}

/// Where `explain --admission` reads what the webhook would know.
struct AdmissionSources {
    namespace_manifest: Option<String>,
    rules: Option<String>,
    restriction: Option<String>,
}

fn read_text(path: &str) -> Result<String> {
    if path == "-" {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s).map_err(|e| crate::Error::input("<stdin>", e))?;
        return Ok(s);
    }
    std::fs::read_to_string(path).map_err(|e| crate::Error::input(path, e))
}

/// TolerationRules from a YAML stream (documents separated by `---`).
fn read_rules(path: &str) -> Result<Vec<TolerationRule>> {
    let text = read_text(path)?;
    let mut rules = Vec::new();
    for (i, doc) in text.split("\n---").enumerate() {
        if doc.lines().all(|l| l.trim().is_empty() || l.trim_start().starts_with('#') || l.trim() == "---") {
            continue;
        }
        rules.push(parse_manifest(&format!("{path} (document {})", i + 1), doc, "TolerationRule")?);
    }
    Ok(rules)
}

async fn run_admission(
    pod: &str,
    from_cluster: bool,
    sources: AdmissionSources,
    output: OutputFormat,
    client: &ClientArgs,
) -> Result<()> {
    let client = if from_cluster { Some(crate::runtime::client::client(client).await?) } else { None };
    let pod: Pod = match &client {
        Some(c) if !std::path::Path::new(pod).exists() && pod != "-" => {
            let (ns, name) = pod.split_once('/').unwrap_or(("default", pod));
            kube::Api::<Pod>::namespaced(c.clone(), ns)
                .get(name)
                .await
                .map_err(|e| crate::Error::input(&format!("pod {ns}/{name}"), e))?
        }
        _ => read_manifest(pod, "Pod")?,
    };
    let namespace_obj: Option<Namespace> = match (&sources.namespace_manifest, &client) {
        (Some(path), _) => Some(read_manifest(path, "Namespace")?),
        (None, Some(c)) => {
            let name = pod.metadata.namespace.clone().unwrap_or_else(|| "default".to_owned());
            kube::Api::<Namespace>::all(c.clone())
                .get_opt(&name)
                .await
                .map_err(|e| crate::Error::input(&format!("namespace {name}"), e))?
        }
        (None, None) => None,
    };
    let namespace = pod
        .metadata
        .namespace
        .clone()
        .or_else(|| namespace_obj.as_ref().and_then(|n| n.metadata.name.clone()))
        .unwrap_or_else(|| "default".to_owned());
    let rules: Vec<TolerationRule> = match (&sources.rules, &client) {
        (Some(path), _) => read_rules(path)?,
        (None, Some(c)) => {
            kube::Api::<TolerationRule>::all(c.clone()).list(&Default::default()).await.map(|l| l.items).unwrap_or_else(
                |e| {
                    tracing::warn!(error = %e, "listing TolerationRules (is the CRD installed?)");
                    Vec::new()
                },
            )
        }
        (None, None) => Vec::new(),
    };
    let restriction = match &sources.restriction {
        Some(path) => RestrictionConfig::parse(path, &read_text(path)?)?,
        None => RestrictionConfig::default(),
    };
    let plugins = Plugins {
        default_toleration_seconds: Some(DefaultTolerationSeconds::default()),
        pod_toleration_restriction: Some(restriction),
        extended_resource_toleration: true,
        toleration_rules: true,
        ..Plugins::default()
    };
    let set = RuleSet::build(rules.iter().map(|r| (r.metadata.name.as_deref().unwrap_or_default(), &r.spec)));
    let info = namespace_obj.as_ref().map(|n| NamespaceInfo::from_meta(&n.metadata));
    let e = admission_explain(&pod, &namespace, &plugins, Context { namespace: info.as_ref(), rules: &set });
    match output {
        OutputFormat::Text => print!("{}", admission_render(&e)),
        OutputFormat::Json => {
            let json = serde_json::to_string_pretty(&e).map_err(|e| crate::Error::input("output", e))?;
            println!("{json}");
        }
    }
    Ok(())
}
