//! Delegated authentication and authorization for the secure metrics endpoint, as
//! kube-controller-manager's secure port and controller-runtime's
//! `WithAuthenticationAndAuthorization` filter do it: the request's bearer token is reviewed by
//! the API server (a TokenReview), and the identity it names must be allowed `get` on the
//! non-resource URL (a SubjectAccessReview). Both answers are cached for 10 s, kube-controller-
//! manager's defaults (`--authentication-token-webhook-cache-ttl`,
//! `--authorization-webhook-cache-{un,}authorized-ttl`), keyed by a SHA-256 of the token so that
//! no token is kept in memory; API errors are not cached.
//!
//! The answers: no or malformed `Authorization` header, or a token the API server does not
//! authenticate: `401` (with `WWW-Authenticate: Bearer`); an identity without the permission:
//! `403` (neither cached when the API server reported an error with it, as upstream does not
//! cache errors); the API server unreachable or slow (10 s), or more than four reviews already
//! in flight: `503`, not cached. Each is counted in `nlc_metrics_requests_total{result}`.
//!
//! Any pod can send tokens, so the reviews are bounded in total and per source: at most four
//! in flight, and [`REVIEWS_PER_SOURCE_PER_SECOND`] from one address. Answers for tokens the API
//! server does not authenticate are kept apart, in a small cache of their own, so that random
//! tokens cannot fill the one that holds real identities' answers; and when the reviews are
//! busy with other callers' tokens, a token whose last answer named an identity is served that
//! answer for up to [`STALE_FOR`] (a scraper keeps scraping through a flood; a token revoked
//! meanwhile is honoured that much longer, only while the flood lasts, and not at all once a
//! review has found it revoked). A source over its own pace gets 503, never a stale answer.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::clock::Stopwatch;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, UserInfo};
use k8s_openapi::api::authorization::v1::{NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use kube::api::{Api, PostParams};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// How long an answer is reused.
const TTL: Duration = Duration::from_secs(10);
/// At most this many cached answers (a flood of random tokens cannot grow memory past it; when
/// full of live answers, new ones are not cached, so a scraper's answer is never pushed out).
const MAX_CACHED: usize = 4096;
/// At most this many answers for tokens the API server does not authenticate.
const MAX_NEGATIVE: usize = 256;
/// At most this many reviews in flight: more callers with uncached tokens are answered 503 at
/// once, so that a flood of tokens cannot queue requests on the API server in the controller's
/// name.
const MAX_REVIEWS: usize = 4;
/// Reviews one address may cause, per second (burst four times that): a scraper's token is
/// reviewed once per TTL; an address sending new tokens faster is sending junk.
pub(crate) const REVIEWS_PER_SOURCE_PER_SECOND: u32 = 5;
/// How long past its TTL an identity's last answer still serves while reviews are busy.
pub(crate) const STALE_FOR: Duration = Duration::from_secs(300);
/// A review the API server does not answer within this long fails (503, not cached).
const REVIEW_TIMEOUT: Duration = Duration::from_secs(10);

/// What a request may do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    Allowed,
    /// No token, or one the API server does not authenticate.
    Unauthenticated,
    /// Authenticated as this user, who may not `get` the path.
    Forbidden(String),
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

/// The cached answers, by the token's SHA-256, with when they were given.
type Answers = HashMap<[u8; 32], (Stopwatch, Verdict)>;

type SourceLimiter = governor::RateLimiter<
    std::net::IpAddr,
    governor::state::keyed::DefaultKeyedStateStore<std::net::IpAddr>,
    governor::clock::DefaultClock,
>;

/// The reviewer of the protected paths (`/metrics`, `/configz`).
#[derive(Clone)]
pub(crate) struct Delegated {
    client: kube::Client,
    /// Answers naming an identity (allowed or forbidden).
    cache: Arc<Mutex<Answers>>,
    /// Answers for tokens not authenticated, apart.
    negative: Arc<Mutex<HashMap<[u8; 32], Stopwatch>>>,
    reviews: Arc<tokio::sync::Semaphore>,
    per_source: Arc<SourceLimiter>,
    results: Family<ResultLabels, Counter>,
}

/// Why a request could not be reviewed (answered 503, never cached).
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReviewError {
    #[error(transparent)]
    Api(#[from] kube::Error),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("too many reviews in flight")]
    Busy,
}

impl Delegated {
    pub(crate) fn new(client: kube::Client, registry: &mut Registry) -> Self {
        let results = Family::<ResultLabels, Counter>::default();
        registry.register(
            "nlc_metrics_requests",
            "Requests to the secure metrics endpoint, by result (allowed, unauthenticated, forbidden, busy, error)",
            results.clone(),
        );
        let rate = std::num::NonZeroU32::new(REVIEWS_PER_SOURCE_PER_SECOND).unwrap_or(std::num::NonZeroU32::MIN);
        let burst = rate.saturating_mul(std::num::NonZeroU32::MIN.saturating_add(3));
        Self {
            client,
            cache: Arc::default(),
            negative: Arc::default(),
            reviews: Arc::new(tokio::sync::Semaphore::new(MAX_REVIEWS)),
            per_source: Arc::new(governor::RateLimiter::keyed(governor::Quota::per_second(rate).allow_burst(burst))),
            results,
        }
    }

    /// Counts a request's result.
    pub(crate) fn count(&self, result: &'static str) {
        self.results.get_or_create(&ResultLabels { result }).inc();
    }

    /// The verdict on a request for `path` carrying this `Authorization` header value (if
    /// any); `Err` when the API server could not answer.
    pub(crate) async fn review(
        &self,
        authorization: Option<&[u8]>,
        path: &'static str,
        source: Option<std::net::IpAddr>,
    ) -> Result<Verdict, ReviewError> {
        let Some(token) = authorization.and_then(bearer) else {
            return Ok(Verdict::Unauthenticated);
        };
        // Cached by path and token: one token may read one path and not the other.
        let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
        ctx.update(path.as_bytes());
        ctx.update(&[0]);
        ctx.update(token.as_bytes());
        let key = ctx.finish();
        let mut hash = [0u8; 32];
        hash.copy_from_slice(key.as_ref());
        let now = Stopwatch::start();
        let last = self.cache.lock().unwrap_or_else(|p| p.into_inner()).get(&hash).cloned();
        if let Some((at, v)) = &last
            && now.since(*at) < TTL
        {
            return Ok(v.clone());
        }
        if self.negative.lock().unwrap_or_else(|p| p.into_inner()).get(&hash).is_some_and(|at| now.since(*at) < TTL) {
            return Ok(Verdict::Unauthenticated);
        }
        // This source over its pace: busy (its own doing; no stale answer, which it could
        // otherwise bring about at will).
        if source.is_some_and(|ip| self.per_source.check_key(&ip).is_err()) {
            return Err(ReviewError::Busy);
        }
        // The reviews busy (others' doing): an identity's last answer, if recent enough.
        let Ok(_permit) = self.reviews.try_acquire() else {
            let stale = last.filter(|(at, _)| now.since(*at) < TTL + STALE_FOR).map(|(_, v)| v);
            return stale.ok_or(ReviewError::Busy);
        };
        let (verdict, cacheable) = tokio::time::timeout(REVIEW_TIMEOUT, self.ask(token, path))
            .await
            .map_err(|_| ReviewError::Timeout(REVIEW_TIMEOUT))??;
        if !cacheable {
            return Ok(verdict);
        }
        if verdict == Verdict::Unauthenticated {
            // No longer an identity (a revoked token): its last answer goes.
            self.cache.lock().unwrap_or_else(|p| p.into_inner()).remove(&hash);
            let mut negative = self.negative.lock().unwrap_or_else(|p| p.into_inner());
            if negative.len() >= MAX_NEGATIVE {
                negative.retain(|_, at| now.since(*at) < TTL);
                self.per_source.retain_recent();
            }
            if negative.len() < MAX_NEGATIVE {
                negative.insert(hash, now);
            }
            return Ok(verdict);
        }
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() >= MAX_CACHED {
            cache.retain(|_, (at, _)| now.since(*at) < TTL + STALE_FOR);
            self.per_source.retain_recent();
        }
        // A newer answer for a token already cached always replaces it.
        if cache.len() < MAX_CACHED || cache.contains_key(&hash) {
            cache.insert(hash, (now, verdict.clone()));
        }
        Ok(verdict)
    }

    /// The verdict, and whether it may be cached (not when the API server reported an error
    /// with it, as upstream's token cache does not cache errors).
    async fn ask(&self, token: &str, path: &str) -> Result<(Verdict, bool), ReviewError> {
        let review = TokenReview {
            spec: TokenReviewSpec { token: Some(token.to_owned()), audiences: None },
            ..Default::default()
        };
        let reviewed = Api::<TokenReview>::all(self.client.clone()).create(&PostParams::default(), &review).await?;
        let status = reviewed.status.unwrap_or_default();
        let user = match (status.authenticated, status.user) {
            (Some(true), Some(user)) => user,
            // Not authenticated: 401 either way; with an error (an invalid token, or an
            // authenticator that failed) the answer is not cached.
            _ => return Ok((Verdict::Unauthenticated, status.error.is_none_or(|e| e.is_empty()))),
        };
        let UserInfo { username, uid, groups, extra } = user;
        let name = username.clone().unwrap_or_default();
        let access = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: username,
                uid,
                groups,
                extra,
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(path.to_owned()),
                    verb: Some("get".to_owned()),
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let decided =
            Api::<SubjectAccessReview>::all(self.client.clone()).create(&PostParams::default(), &access).await?;
        let status = decided.status.unwrap_or_default();
        if status.allowed {
            return Ok((Verdict::Allowed, true));
        }
        // Denied with an evaluation error (an authorizer failed): 403, not cached.
        Ok((Verdict::Forbidden(name), status.evaluation_error.is_none_or(|e| e.is_empty())))
    }
}

/// The token of a `Bearer` header value (the scheme case-insensitive, as RFC 7235 says).
fn bearer(value: &[u8]) -> Option<&str> {
    let value = std::str::from_utf8(value).ok()?.trim();
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::bearer;

    #[test]
    fn only_a_non_empty_bearer_token_is_taken() {
        assert_eq!(bearer(b"Bearer abc"), Some("abc"));
        assert_eq!(bearer(b"bearer  abc "), Some("abc"));
        assert_eq!(bearer(b"Basic abc"), None);
        assert_eq!(bearer(b"Bearer "), None);
        assert_eq!(bearer(b"Bearer"), None);
        assert_eq!(bearer(&[0xff, 0x20, 0x41]), None);
    }
}
