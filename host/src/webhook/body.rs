//! Reading a review's body within bounds: a size cap per request, a host-wide budget of
//! bytes being buffered at once, and a time limit for the body to arrive.
//!
//! Why: a body is buffered whole before the review runs, and any client that can reach
//! the port may send one. Without a budget, 200 connections each sending 8 MiB hold
//! 1.6 GiB; without a time limit a client that sends one byte a second holds its
//! buffer forever.
//!
//! Flow: a request declaring more than [`MAX_BODY`] is refused (413) before a byte of
//! it is read; otherwise it reserves its declared length (or [`MAX_BODY`] when it
//! declares none) from the budget, waiting at most [`BUDGET_WAIT`], else it is refused
//! (503) and counted; then the body must arrive within the body timeout and stay within
//! what it declared. A real AdmissionReview of a Pod is a few KiB, so the budget
//! only ever runs short under a flood of large bodies.

use axum::body::{Body, Bytes};
use axum::http::{Request, StatusCode, header};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::metrics::METRICS;

/// Why 7 MiB: the apiserver refuses requests over 3 MiB, so a review carries at most an
/// object and its old version of that size each, plus the envelope.
pub const MAX_BODY: usize = 7 << 20;

/// Why 64 MiB: nine of the largest possible reviews, or tens of thousands of Pod
/// reviews, at once.
pub const BODY_BUDGET: usize = 64 << 20;

/// How long a request waits for room in the budget before it is refused.
const BUDGET_WAIT: Duration = Duration::from_secs(1);

/// The budget counts in KiB, so it fits a semaphore's permit count.
const UNIT: usize = 1 << 10;

/// The bytes being buffered host-wide (see the module docs).
#[derive(Clone, Debug)]
pub struct BodyBudget {
    units: Arc<Semaphore>,
    max_body: usize,
    time: Duration,
}

impl BodyBudget {
    pub fn new(total: usize, max_body: usize, time: Duration) -> Self {
        BodyBudget { units: Arc::new(Semaphore::new(total.div_ceil(UNIT).max(1))), max_body, time }
    }

    /// The whole body of `req`, or the status and message to refuse it with.
    pub async fn read(&self, req: Request<Body>) -> Result<(Bytes, OwnedSemaphorePermit), (StatusCode, String)> {
        let declared = req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<usize>().ok());
        let refuse = |code, msg: String| {
            METRICS.webhook_bodies_refused.inc();
            (code, msg)
        };
        if let Some(n) = declared
            && n > self.max_body
        {
            let msg = format!("the review is {n} bytes, over the {} byte limit", self.max_body);
            return Err(refuse(StatusCode::PAYLOAD_TOO_LARGE, msg));
        }
        let limit = declared.unwrap_or(self.max_body);
        let units = limit.div_ceil(UNIT).max(1) as u32;
        let permit = match tokio::time::timeout(BUDGET_WAIT, self.units.clone().acquire_many_owned(units)).await {
            Ok(Ok(p)) => p,
            _ => {
                let msg = "the webhook server is buffering its most review bodies at once; try again".to_owned();
                return Err(refuse(StatusCode::SERVICE_UNAVAILABLE, msg));
            }
        };
        match tokio::time::timeout(self.time, axum::body::to_bytes(req.into_body(), limit)).await {
            Ok(Ok(b)) => Ok((b, permit)),
            Ok(Err(e)) => {
                Err(refuse(StatusCode::BAD_REQUEST, format!("cannot read the review (at most {limit} bytes): {e}")))
            }
            Err(_) => {
                Err(refuse(StatusCode::REQUEST_TIMEOUT, format!("the review did not arrive within {:?}", self.time)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(body: Vec<u8>, declared: Option<usize>) -> Request<Body> {
        let mut r = Request::builder().method("POST").uri("/p/h");
        if let Some(n) = declared {
            r = r.header(header::CONTENT_LENGTH, n);
        }
        r.body(Body::from(body)).unwrap()
    }

    #[tokio::test]
    async fn oversized_bodies_are_refused_before_they_are_read() {
        let b = BodyBudget::new(BODY_BUDGET, 1000, Duration::from_secs(1));
        let e = b.read(req(vec![], Some(1001))).await.unwrap_err();
        assert_eq!(e.0, StatusCode::PAYLOAD_TOO_LARGE, "{}", e.1);
        // No length declared: read up to the cap, then refused.
        let e = b.read(req(vec![b'x'; 1001], None)).await.unwrap_err();
        assert_eq!(e.0, StatusCode::BAD_REQUEST, "{}", e.1);
        let (body, _) = b.read(req(vec![b'x'; 1000], Some(1000))).await.unwrap();
        assert_eq!(body.len(), 1000);
    }

    #[tokio::test]
    async fn the_budget_bounds_bodies_held_at_once() {
        let b = BodyBudget::new(4 * UNIT, 4 * UNIT, Duration::from_secs(1));
        let held = b.read(req(vec![b'x'; 3 * UNIT], Some(3 * UNIT))).await.unwrap();
        let e = b.read(req(vec![b'x'; 2 * UNIT], Some(2 * UNIT))).await.unwrap_err();
        assert_eq!(e.0, StatusCode::SERVICE_UNAVAILABLE, "{}", e.1);
        drop(held);
        let _again =
            b.read(req(vec![b'x'; 2 * UNIT], Some(2 * UNIT))).await.expect("room again once the first is done");
    }
}
