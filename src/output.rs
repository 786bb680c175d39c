//! `-o` of the commands that print a report (`explain`, `status`): its own module so that the
//! commands and the top-level command that holds their flags do not import each other.

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum OutputFormat {
    Text,
    Json,
}
