//! Requests whose answer is read only as far as it is used.
//!
//! - Writes whose answer is not read at all ([`LeanClient::send_unread`]): an eviction's
//!   condition patch and delete, an event. Their answer is the whole object written (a pod of
//!   several kilobytes); decoding it into `k8s-openapi`'s types only to drop it was about a
//!   tenth of the controller's CPU in an eviction storm, and most of its allocations. Here only
//!   the answer's code is used; its body is read to the end (so that the connection can be
//!   used again) and dropped.
//! - Answers decoded into the cache's slim types ([`LeanClient::slim`]): an eviction's live
//!   read of its node, which needs only the taints, not the node's images and conditions; a
//!   node write's answer (its conditions or taints written), of which the cache keeps only the
//!   slim node.
//!
//! With `--kube-api-content-type` protobuf the answer is asked for in protobuf, else JSON, as
//! client-go does for built-in kinds: the API server encodes protobuf for less CPU than JSON.
//! An answer is read by its `Content-Type`, whatever was asked for; an error answer's `Status`
//! is read as the watches read it ([`super::watch::proto`]), so callers see the same
//! [`kube::Error::Api`] as from `kube::Api`.

use hyper::header::{ACCEPT, CONTENT_TYPE, HeaderValue};
use kube::client::Body;
use nlc_core::wire::proto;
use serde::de::DeserializeOwned;

use super::watch::proto::{PROTOBUF, error_status, media_type};
use super::watch::{Decoded, Format};

/// A request as [`kube::core::Request`] builds it.
pub(crate) type Built = Result<hyper::Request<Vec<u8>>, kube::core::request::Error>;

/// `req` with `?timeout=` set to `d` (whole milliseconds, at least one): the API server gives the
/// request up by then, as the client does ([`super::write_window::WriteWindow::write`]).
pub(crate) fn with_timeout(req: Built, d: std::time::Duration) -> Built {
    req.map(|mut r| {
        let uri = r.uri().to_string();
        let sep = if uri.contains('?') { '&' } else { '?' };
        let with = format!("{uri}{sep}timeout={}ms", d.as_millis().max(1));
        if let Ok(parsed) = with.parse() {
            *r.uri_mut() = parsed;
        }
        r
    })
}

/// A client for requests whose answer is read only as far as it is used.
#[derive(Clone)]
pub struct LeanClient {
    client: kube::Client,
    accept: HeaderValue,
}

impl LeanClient {
    /// Requests through `client`, asking for answers in `wire`.
    pub fn new(client: kube::Client, wire: Format) -> Self {
        Self { client, accept: HeaderValue::from_static(wire.accept()) }
    }

    /// Sends `req`: `Ok` for a 2xx answer, whose body is not decoded; an error answer as
    /// [`kube::Error::Api`].
    pub async fn send_unread(&self, req: Built) -> kube::Result<()> {
        self.send(req).await.map(drop)
    }

    /// Sends `req` (a GET of one object, or a write answered with the object written) and
    /// decodes the answer into `K`'s slim type, from protobuf or JSON by its `Content-Type`. An
    /// object with a field that does not read is an error, as a strict decoder would make it.
    pub async fn slim<K: Decoded + DeserializeOwned>(&self, req: Built) -> kube::Result<K> {
        let (content_type, body) = self.send(req).await?;
        let object = match (media_type(content_type.as_ref()).as_str(), K::protobuf()) {
            (PROTOBUF, Some(decode)) => {
                let envelope = proto::unknown(&body).map_err(|e| undecodable(&e))?;
                decode(envelope.raw)
            }
            _ => serde_json::from_slice::<K>(&body).map_err(kube::Error::SerdeError)?,
        };
        match object.problem() {
            Some(problem) => Err(undecodable(&problem)),
            None => Ok(object),
        }
    }

    /// Sends `req` (a GET of one object) asking for JSON, and decodes the whole object: for the
    /// rare read that needs what the slim types leave out.
    pub(crate) async fn whole<K: DeserializeOwned>(&self, req: Built) -> kube::Result<K> {
        let (_, body) = self.send_accepting(req, HeaderValue::from_static("application/json")).await?;
        serde_json::from_slice::<K>(&body).map_err(kube::Error::SerdeError)
    }

    /// The answer's `Content-Type` and body; an error answer as [`kube::Error::Api`]. The media
    /// type is only worked out where it is read, not for every write that lands.
    async fn send(&self, req: Built) -> kube::Result<(Option<HeaderValue>, hyper::body::Bytes)> {
        self.send_accepting(req, self.accept.clone()).await
    }

    async fn send_accepting(
        &self,
        req: Built,
        accept: HeaderValue,
    ) -> kube::Result<(Option<HeaderValue>, hyper::body::Bytes)> {
        let mut req = req.map_err(kube::Error::BuildRequest)?.map(Body::from);
        req.headers_mut().insert(ACCEPT, accept);
        let res = self.client.send(req).await?;
        let code = res.status();
        let content_type = res.headers().get(CONTENT_TYPE).cloned();
        // Read to the end even when it is not used: an answer left half read would close the
        // connection.
        let body = match res.into_body().collect_bytes().await {
            Ok(body) => body,
            // An error answer whose body broke off is still that answer (its code alone).
            Err(_) if code.is_client_error() || code.is_server_error() => hyper::body::Bytes::new(),
            Err(e) => return Err(e),
        };
        if code.is_client_error() || code.is_server_error() {
            let media = media_type(content_type.as_ref());
            return Err(kube::Error::Api(Box::new(error_status(code.as_u16(), &media, &body))));
        }
        Ok((content_type, body))
    }
}

/// An answer that does not decode: the error a JSON body that does not parse is.
fn undecodable(e: &dyn std::fmt::Display) -> kube::Error {
    kube::Error::SerdeError(<serde_json::Error as serde::de::Error>::custom(format_args!("decoding the answer: {e}")))
}
