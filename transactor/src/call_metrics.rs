//! Every call the node serves, counted by method and status code with its
//! duration (`corium_fleet_requests_total`,
//! `corium_fleet_request_duration_seconds`: the owner's part of a call,
//! beside the ingress's end-to-end figure), as a tower layer around all of
//! the node's gRPC services.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use corium_fleet_common::metrics::calls::{Calls, Observed, code_of};
use tonic::codegen::http;

/// Wraps each service in [`CallMetrics`].
#[derive(Clone)]
pub(crate) struct CallMetricsLayer(pub Calls);

impl<S> tower_layer::Layer<S> for CallMetricsLayer {
    type Service = CallMetrics<S>;

    fn layer(&self, inner: S) -> Self::Service {
        CallMetrics {
            inner,
            calls: self.0.clone(),
        }
    }
}

/// A service whose calls are counted in `calls`.
#[derive(Clone)]
pub(crate) struct CallMetrics<S> {
    inner: S,
    calls: Calls,
}

impl<S, B> tower_service::Service<http::Request<B>> for CallMetrics<S>
where
    S: tower_service::Service<http::Request<B>, Response = http::Response<tonic::body::Body>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let call = self.calls.begin(request.uri().path());
        let answer = self.inner.call(request);
        Box::pin(async move {
            let response = answer.await?;
            Ok(match code_of(response.headers()) {
                Some(code) => {
                    call.end(code);
                    response
                }
                None => response.map(|body| tonic::body::Body::new(Observed::new(body, call))),
            })
        })
    }
}
