//! `/configz`: the configuration a process runs with, as kube-controller-manager serves it on its
//! secure port: every flag of its command with the value in effect (given, from the environment,
//! or the default) and the text of its `--config` file, under `componentconfig`.
//!
//! The leader also publishes the same document on its leader election Lease
//! ([`ANNOTATION`]): `status` reads it there, with the Lease read it already needs, instead of
//! asking for the controller's flags again. (The admin port cannot serve `status` through the API
//! server's proxy: the proxy drops the caller's credentials, and `/configz` is guarded as
//! `/metrics` is.)

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The Lease annotation carrying the leader's configuration document.
pub(crate) const ANNOTATION: &str = "node-lifecycle-controller.io/configz";

/// A process's configuration.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Configz {
    /// The subcommand (`run`, `webhook`).
    pub(crate) command: String,
    /// `--version`'s text.
    pub(crate) version: String,
    /// Every flag (its long name, no dashes) with its values in effect.
    pub(crate) flags: BTreeMap<String, Vec<String>>,
    /// The text of the `--config` file, when one is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) config_file: Option<String>,
}

/// The document's envelope, as kube components answer `/configz`.
#[derive(Serialize, Deserialize)]
struct Document {
    componentconfig: Configz,
}

impl Configz {
    /// The chosen subcommand's flags from a parsed command line: every flag that has a value
    /// (given, from the environment, or defaulted). `cmd` is the command `matches` came from.
    pub(crate) fn from_matches(cmd: &clap::Command, matches: &clap::ArgMatches) -> Self {
        let Some((name, sub)) = matches.subcommand() else {
            return Self::default();
        };
        let mut flags = BTreeMap::new();
        let args = cmd.find_subcommand(name).into_iter().flat_map(|c| c.get_arguments()).chain(cmd.get_arguments());
        for arg in args {
            let Some(long) = arg.get_long() else { continue };
            let values = sub.try_get_raw(arg.get_id().as_str()).ok().flatten();
            let values: Vec<String> = values.into_iter().flatten().map(|v| v.to_string_lossy().into_owned()).collect();
            if !values.is_empty() {
                flags.insert(long.to_owned(), values);
            }
        }
        let version = cmd.get_version().unwrap_or_default().to_owned();
        Self { command: name.to_owned(), version, flags, config_file: None }
    }

    /// The JSON document `/configz` answers.
    pub(crate) fn document(&self) -> String {
        serde_json::to_string(&Document { componentconfig: self.clone() })
            .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    /// Reads a document [`Configz::document`] wrote.
    pub(crate) fn from_document(text: &str) -> Result<Self, String> {
        serde_json::from_str::<Document>(text).map(|d| d.componentconfig).map_err(|e| e.to_string())
    }

    /// The flags `keep` accepts as command-line arguments (`--name=value`, one per value), to
    /// parse again with the same flag definitions.
    pub(crate) fn args(&self, keep: impl Fn(&str) -> bool) -> Vec<String> {
        self.flags
            .iter()
            .filter(|(name, _)| keep(name))
            .flat_map(|(name, values)| values.iter().map(move |v| format!("--{name}={v}")))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::Configz;
    use clap::{CommandFactory, FromArgMatches};

    #[test]
    fn configz_records_given_and_default_values_and_parses_back() {
        let cmd = crate::config::Cli::command();
        let argv = ["nlc", "run", "--node-monitor-grace-period=17s", "--taint-rule", "A=False:a.example/x:NoSchedule"];
        let matches = cmd.clone().try_get_matches_from(argv).expect("parses");
        let c = Configz::from_matches(&cmd, &matches);
        assert_eq!(c.command, "run");
        assert_eq!(c.flags["node-monitor-grace-period"], ["17s"]);
        assert_eq!(c.flags["node-eviction-rate"], ["0.1"], "defaults are recorded");
        assert_eq!(c.flags["taint-rule"], ["A=False:a.example/x:NoSchedule"]);
        assert_eq!(c.flags["log-format"], ["plain"], "global flags too");
        assert!(!c.flags.contains_key("help"));
        let back = Configz::from_document(&c.document()).expect("round trip");
        assert_eq!(back, c);
        // The recorded flags start the same command again.
        let mut again = vec!["nlc".to_owned(), "run".to_owned()];
        again.extend(c.args(|_| true));
        let m = cmd.clone().try_get_matches_from(&again).expect("the recorded flags parse");
        crate::config::Cli::from_arg_matches(&m).expect("and build the command");
        assert_eq!(Configz::from_matches(&cmd, &m).flags, c.flags);
    }
}
