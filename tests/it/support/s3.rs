//! An S3-compatible server in-process, for the commands that read an S3
//! destination's objects: path-style requests, `CreateBucket`,
//! `PutObject`, `GetObject` and `ListObjectsV2` (a prefix, pages of
//! `max-keys` with a continuation token, as S3 pages them). It refuses what
//! S3 refuses for these: an unknown bucket (`NoSuchBucket`), an unknown key
//! (`NoSuchKey`). No authentication.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

type Buckets = Arc<Mutex<BTreeMap<String, BTreeMap<String, Bytes>>>>;

/// A running server and an S3 client of it.
pub struct LocalS3 {
    /// Path-style, at the server.
    pub client: aws_sdk_s3::Client,
}

impl LocalS3 {
    /// Starts a server on a free port of the loopback interface.
    pub async fn start() -> LocalS3 {
        let buckets: Buckets = Arc::default();
        let app = Router::new()
            .route("/{bucket}", get(list).put(create))
            .route("/{bucket}/", get(list).put(create))
            .route("/{bucket}/{*key}", get(get_object).put(put_object))
            .with_state(buckets);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        let config = aws_sdk_s3::config::Builder::new()
            .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
            .region(aws_sdk_s3::config::Region::new("us-east-1"))
            .credentials_provider(aws_sdk_s3::config::Credentials::new(
                "local", "local", None, None, "test",
            ))
            .endpoint_url(&url)
            .force_path_style(true)
            // (Checksums in headers, not in an aws-chunked body.)
            .request_checksum_calculation(
                aws_sdk_s3::config::RequestChecksumCalculation::WhenRequired,
            )
            .build();
        LocalS3 {
            client: aws_sdk_s3::Client::from_conf(config),
        }
    }
}

fn error(status: StatusCode, code: &str, message: &str) -> Response {
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>{code}</Code><Message>{message}</Message></Error>"
    );
    (status, [("content-type", "application/xml")], body).into_response()
}

fn query(uri: &Uri) -> HashMap<String, String> {
    uri.query()
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k), decode(v))
        })
        .collect()
}

/// A query component, percent-decoded.
fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 3;
                        continue;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

async fn create(State(buckets): State<Buckets>, Path(bucket): Path<String>) -> Response {
    buckets.lock().unwrap().entry(bucket).or_default();
    StatusCode::OK.into_response()
}

async fn list(State(buckets): State<Buckets>, Path(bucket): Path<String>, uri: Uri) -> Response {
    let q = query(&uri);
    let buckets = buckets.lock().unwrap();
    let Some(objects) = buckets.get(&bucket) else {
        return error(
            StatusCode::NOT_FOUND,
            "NoSuchBucket",
            "The specified bucket does not exist",
        );
    };
    let prefix = q.get("prefix").cloned().unwrap_or_default();
    let max: usize = q
        .get("max-keys")
        .and_then(|m| m.parse().ok())
        .unwrap_or(1000)
        .min(1000);
    let after = q.get("continuation-token").cloned();
    let keys: Vec<(&String, &Bytes)> = objects
        .iter()
        .filter(|(k, _)| k.starts_with(&prefix))
        .filter(|(k, _)| after.as_ref().is_none_or(|a| *k > a))
        .collect();
    let page = &keys[..keys.len().min(max)];
    let truncated = keys.len() > page.len();
    let mut body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Name>{}</Name><Prefix>{}</Prefix><KeyCount>{}</KeyCount><MaxKeys>{max}</MaxKeys><IsTruncated>{truncated}</IsTruncated>",
        escape(&bucket),
        escape(&prefix),
        page.len()
    );
    for (key, data) in page {
        body.push_str(&format!(
            "<Contents><Key>{}</Key><Size>{}</Size><StorageClass>STANDARD</StorageClass></Contents>",
            escape(key),
            data.len()
        ));
    }
    if truncated {
        let last = page.last().map(|(k, _)| escape(k)).unwrap_or_default();
        body.push_str(&format!(
            "<NextContinuationToken>{last}</NextContinuationToken>"
        ));
    }
    body.push_str("</ListBucketResult>");
    ([("content-type", "application/xml")], body).into_response()
}

async fn get_object(
    State(buckets): State<Buckets>,
    Path((bucket, key)): Path<(String, String)>,
) -> Response {
    let buckets = buckets.lock().unwrap();
    let Some(objects) = buckets.get(&bucket) else {
        return error(
            StatusCode::NOT_FOUND,
            "NoSuchBucket",
            "The specified bucket does not exist",
        );
    };
    match objects.get(&key) {
        Some(data) => data.clone().into_response(),
        None => error(
            StatusCode::NOT_FOUND,
            "NoSuchKey",
            "The specified key does not exist.",
        ),
    }
}

async fn put_object(
    State(buckets): State<Buckets>,
    Path((bucket, key)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let mut buckets = buckets.lock().unwrap();
    let Some(objects) = buckets.get_mut(&bucket) else {
        return error(
            StatusCode::NOT_FOUND,
            "NoSuchBucket",
            "The specified bucket does not exist",
        );
    };
    objects.insert(key, body);
    StatusCode::OK.into_response()
}
