//! The admission webhook's metrics.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// The admission webhook.
#[derive(Clone)]
pub(crate) struct WebhookMetrics {
    pub(crate) requests: Family<CodeLabels, Counter>,
    pub(crate) duration: Family<EndpointLabels, Histogram, fn() -> Histogram>,
    pub(crate) rules: Family<RuleStateLabels, Gauge>,
    pub(crate) namespace_lookups: Family<OutcomeLabels, Counter>,
    pub(crate) denials: Family<DenialLabels, Counter>,
    pub(crate) certificate_expiry: Gauge<f64, std::sync::atomic::AtomicU64>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct DenialLabels {
    pub(crate) endpoint: &'static str,
    pub(crate) plugin: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct OutcomeLabels {
    pub(crate) outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct CodeLabels {
    pub(crate) endpoint: &'static str,
    pub(crate) code: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct EndpointLabels {
    pub(crate) endpoint: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RuleStateLabels {
    pub(crate) state: &'static str,
}

fn webhook_buckets() -> Histogram {
    // 10 us to ~160 ms.
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(0.000_01, 2.0, 15))
}

impl Default for WebhookMetrics {
    fn default() -> Self {
        Self {
            requests: Family::default(),
            duration: Family::new_with_constructor(webhook_buckets as fn() -> _),
            rules: Family::default(),
            namespace_lookups: Family::default(),
            denials: Family::default(),
            certificate_expiry: Gauge::default(),
        }
    }
}

impl WebhookMetrics {
    pub(crate) fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register(
            "nlc_webhook_requests",
            "Admission requests, by endpoint (mutate, validate) and HTTP status",
            m.requests.clone(),
        );
        registry.register(
            "nlc_webhook_duration_seconds",
            "Time to decide an admission request (excluding TLS and HTTP), by endpoint",
            m.duration.clone(),
        );
        registry.register(
            "nlc_toleration_rules",
            "TolerationRules by state: applied (valid), invalid (not applied), conflicting",
            m.rules.clone(),
        );
        registry.register(
            "nlc_webhook_namespace_lookups",
            "How the webhook learnt each request's namespace, by outcome: cached, fetched (one live read), shared (waited for another request's read), absent, absent_cached, failed (the request fails and the failurePolicy decides), paced (live reads over their pace, 10/s: the request fails), paced_source (one address's live reads over their pace, 5/s: the request fails), not_synced (503)",
            m.namespace_lookups.clone(),
        );
        registry.register(
            "nlc_webhook_denials",
            "Admission requests refused, by endpoint and the plugin that refused them",
            m.denials.clone(),
        );
        registry.register(
            "nlc_webhook_certificate_expiry_timestamp_seconds",
            "When the serving certificate in use expires (its notAfter, Unix seconds); follows reloads",
            m.certificate_expiry.clone(),
        );
        m
    }

    pub(crate) fn denied(&self, endpoint: nlc_core::admission::Endpoint) {
        let endpoint = match endpoint {
            nlc_core::admission::Endpoint::Mutate => "mutate",
            nlc_core::admission::Endpoint::Validate => "validate",
        };
        self.denials.get_or_create(&DenialLabels { endpoint, plugin: nlc_core::admission::DENYING_PLUGIN }).inc();
    }

    pub(crate) fn namespace_lookup(&self, outcome: &'static str) {
        self.namespace_lookups.get_or_create(&OutcomeLabels { outcome }).inc();
    }

    pub(crate) fn observe(&self, endpoint: nlc_core::admission::Endpoint, code: u16, took: std::time::Duration) {
        let endpoint = match endpoint {
            nlc_core::admission::Endpoint::Mutate => "mutate",
            nlc_core::admission::Endpoint::Validate => "validate",
        };
        self.requests.get_or_create(&CodeLabels { endpoint, code }).inc();
        self.duration.get_or_create(&EndpointLabels { endpoint }).observe(took.as_secs_f64());
    }

    pub(crate) fn set_rules(&self, valid: usize, invalid: usize, conflicting: usize) {
        for (state, n) in [("valid", valid), ("invalid", invalid), ("conflicting", conflicting)] {
            self.rules.get_or_create(&RuleStateLabels { state }).set(n as i64);
        }
    }
}
