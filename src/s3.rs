//! A small synchronous S3 client for the parquet lake's housekeeping: listing, reading and
//! writing the owner marker, and deleting version directories (the janitor). Requests are
//! signed by `rusty-s3` (pre-signed URLs, sans I/O) and sent with `ureq`.
//!
//! The settings are the S3 lake's (`[lake]`: endpoint, region, URL style, TLS, and the names of
//! the environment variables holding the credentials); credentials are never logged, and error
//! messages carry neither them nor signed URLs (whose query string holds a signature).

use crate::config::LakeSection;
use rusty_s3::actions::{DeleteObjects, DeleteObjectsResponse, ListObjectsV2, ObjectIdentifier};
use rusty_s3::{Bucket, Credentials, S3Action, UrlStyle};
use std::time::Duration;

/// How long a signed request stays valid.
const SIGNED_FOR: Duration = Duration::from_secs(600);

/// Objects per `DeleteObjects` request (S3's maximum).
const DELETE_BATCH: usize = 1000;

/// A connection to the bucket of an `s3://bucket/prefix` lake.
pub struct S3Lake {
    bucket: Bucket,
    credentials: Credentials,
    agent: ureq::Agent,
    /// The key prefix of the lake root (`prefix`, without slashes at either end; may be empty).
    root: String,
    /// `s3://bucket`, for messages.
    label: String,
}

impl std::fmt::Debug for S3Lake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Lake").field("bucket", &self.label).field("root", &self.root).finish_non_exhaustive()
    }
}

/// The credentials of an S3 lake, read from the environment variables `[lake]` names.
///
/// # Errors
/// A message naming the variable that is not set.
pub fn credentials(lake: &LakeSection) -> Result<Credentials, String> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let missing = |what: &str, name: &str| format!("the S3 lake `{}` needs {what} in the environment variable `{name}`, which is not set", lake.path);
    let key = var(&lake.s3_access_key_id_env).ok_or_else(|| missing("an access key id", &lake.s3_access_key_id_env))?;
    let secret = var(&lake.s3_secret_access_key_env).ok_or_else(|| missing("a secret access key", &lake.s3_secret_access_key_env))?;
    Ok(match var(&lake.s3_session_token_env) {
        Some(token) => Credentials::new_with_token(key, secret, token),
        None => Credentials::new(key, secret),
    })
}

impl S3Lake {
    /// Connects to the lake `lake` (an `s3://` one).
    ///
    /// # Errors
    /// A message when the lake is not on S3, a credential is missing, or the endpoint is not a
    /// valid host.
    pub fn open(lake: &LakeSection) -> Result<Self, String> {
        let rest = lake.path.strip_prefix("s3://").ok_or_else(|| format!("the lake `{}` is not on S3", lake.path))?;
        let (bucket_name, root) = rest.trim_end_matches('/').split_once('/').unwrap_or((rest.trim_end_matches('/'), ""));
        let region = lake.s3_region.clone().unwrap_or_else(|| "us-east-1".to_string());
        let scheme = if lake.s3_use_ssl.unwrap_or(true) { "https" } else { "http" };
        let host = lake.s3_endpoint.clone().unwrap_or_else(|| format!("s3.{region}.amazonaws.com"));
        let endpoint: url::Url = format!("{scheme}://{host}").parse().map_err(|e| format!("the S3 endpoint `{host}` is not a valid host: {e}"))?;
        // DuckDB's default (and AWS's) is virtual-host addressing.
        let style = if lake.s3_url_style.as_deref() == Some("path") { UrlStyle::Path } else { UrlStyle::VirtualHost };
        let bucket = Bucket::new(endpoint, style, bucket_name.to_string(), region).map_err(|e| format!("the S3 bucket `{bucket_name}` at `{host}`: {e}"))?;
        let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).timeout_global(Some(Duration::from_secs(60))).build().into();
        Ok(Self { bucket, credentials: credentials(lake)?, agent, root: root.trim_matches('/').to_string(), label: format!("s3://{bucket_name}") })
    }

    /// The key of `rel` (a path relative to the lake root, `/`-separated).
    pub fn key(&self, rel: &str) -> String {
        if self.root.is_empty() { rel.to_string() } else { format!("{}/{rel}", self.root) }
    }

    /// The key (relative to the bucket) of an `s3://bucket/…` URL of this lake's bucket.
    ///
    /// # Errors
    /// A message when the URL is of another bucket.
    pub fn key_of_url(&self, url: &str) -> Result<String, String> {
        url.strip_prefix(&self.label)
            .and_then(|k| k.strip_prefix('/'))
            .map(str::to_string)
            .ok_or_else(|| format!("`{url}` is not in the lake's bucket `{}`", self.label))
    }

    fn failed(&self, what: &str, e: impl std::fmt::Display) -> String {
        // ureq's messages may carry the request URL, whose query holds a signature: cut it.
        let message = e.to_string();
        let message = message.split("X-Amz-").next().unwrap_or_default().trim_end_matches(['?', '&']).to_string();
        format!("S3 {what} in `{}`: {message}", self.label)
    }

    fn read_body(&self, what: &str, response: &mut ureq::http::Response<ureq::Body>) -> Result<String, String> {
        response.body_mut().read_to_string().map_err(|e| self.failed(what, e))
    }

    fn check(&self, what: &str, mut response: ureq::http::Response<ureq::Body>) -> Result<String, String> {
        let status = response.status().as_u16();
        let body = self.read_body(what, &mut response)?;
        if (200..300).contains(&status) {
            return Ok(body);
        }
        let code = xml_field(&body, "Code").unwrap_or_default();
        let message = xml_field(&body, "Message").unwrap_or_default();
        Err(format!("S3 {what} in `{}` failed: HTTP {status} {code} {message}", self.label).trim_end().to_string())
    }

    /// Every key and every common prefix under `prefix` (with `delimiter`, one level), over
    /// every page of the listing.
    ///
    /// # Errors
    /// A message naming the request that failed.
    pub fn list(&self, prefix: &str, delimiter: Option<&str>) -> Result<(Vec<String>, Vec<String>), String> {
        let (mut keys, mut prefixes) = (Vec::new(), Vec::new());
        let mut token: Option<String> = None;
        let what = format!("listing of `{prefix}`");
        loop {
            let mut action = ListObjectsV2::new(&self.bucket, Some(&self.credentials));
            action.with_prefix(prefix);
            if let Some(d) = delimiter {
                action.with_delimiter(d);
            }
            if let Some(t) = &token {
                action.with_continuation_token(t.clone());
            }
            let url = action.sign(SIGNED_FOR);
            let response = self.agent.get(url.as_str()).call().map_err(|e| self.failed(&what, e))?;
            let body = self.check(&what, response)?;
            let page = ListObjectsV2::parse_response(&body).map_err(|e| self.failed(&what, e))?;
            keys.extend(page.contents.into_iter().map(|c| c.key));
            prefixes.extend(page.common_prefixes.into_iter().map(|c| c.prefix));
            match page.next_continuation_token {
                Some(t) if !t.is_empty() => token = Some(t),
                _ => break,
            }
        }
        Ok((keys, prefixes))
    }

    /// The object `key` as text, or `None` when it does not exist.
    ///
    /// # Errors
    /// A message naming the request that failed.
    pub fn get(&self, key: &str) -> Result<Option<String>, String> {
        let what = format!("read of `{key}`");
        let url = self.bucket.get_object(Some(&self.credentials), key).sign(SIGNED_FOR);
        let response = self.agent.get(url.as_str()).call().map_err(|e| self.failed(&what, e))?;
        if response.status().as_u16() == 404 {
            return Ok(None);
        }
        self.check(&what, response).map(Some)
    }

    /// Writes the object `key` (an upload is atomic: readers see the old or the new object).
    ///
    /// # Errors
    /// A message naming the request that failed.
    pub fn put(&self, key: &str, body: &str) -> Result<(), String> {
        let what = format!("write of `{key}`");
        let url = self.bucket.put_object(Some(&self.credentials), key).sign(SIGNED_FOR);
        let response = self.agent.put(url.as_str()).send(body.as_bytes()).map_err(|e| self.failed(&what, e))?;
        self.check(&what, response).map(drop)
    }

    /// Deletes the object `key` (no error when it does not exist).
    ///
    /// # Errors
    /// A message naming the request that failed.
    pub fn delete(&self, key: &str) -> Result<(), String> {
        let what = format!("deletion of `{key}`");
        let url = self.bucket.delete_object(Some(&self.credentials), key).sign(SIGNED_FOR);
        let response = self.agent.delete(url.as_str()).call().map_err(|e| self.failed(&what, e))?;
        if response.status().as_u16() == 404 {
            return Ok(());
        }
        self.check(&what, response).map(drop)
    }

    /// Deletes every object under `prefix` (which must end with `/`), listing page by page
    /// and deleting in batches; returns how many objects were deleted.
    ///
    /// # Errors
    /// A message naming the request or the first object that could not be deleted (the objects
    /// deleted before stay deleted; a later call finishes the job).
    pub fn delete_prefix(&self, prefix: &str) -> Result<usize, String> {
        if !prefix.ends_with('/') || prefix.trim_matches('/').is_empty() {
            return Err(format!("refusing to delete under `{prefix}`: not a directory prefix"));
        }
        let (keys, _) = self.list(prefix, None)?;
        let what = format!("deletion under `{prefix}`");
        for batch in keys.chunks(DELETE_BATCH) {
            let objects: Vec<ObjectIdentifier> = batch.iter().map(|k| ObjectIdentifier::new(k.clone())).collect();
            let mut action = DeleteObjects::new(&self.bucket, Some(&self.credentials), objects.iter());
            action.set_quiet(true);
            let url = action.sign(SIGNED_FOR);
            let (body, md5) = action.body_with_md5();
            let response = self.agent.post(url.as_str()).header("Content-MD5", &md5).send(body.as_bytes()).map_err(|e| self.failed(&what, e))?;
            let answer = self.check(&what, response)?;
            match DeleteObjectsResponse::parse(&answer) {
                Ok(parsed) => {
                    if let Some(e) = parsed.errors.first() {
                        return Err(format!("S3 {what} in `{}`: `{}` not deleted: {} {}", self.label, e.key, e.code, e.message));
                    }
                }
                Err(_) if answer.contains("<Error>") => {
                    let key = xml_field(&answer, "Key").unwrap_or_default();
                    return Err(format!("S3 {what} in `{}`: `{key}` not deleted: {}", self.label, xml_field(&answer, "Code").unwrap_or_default()));
                }
                Err(_) => {}
            }
        }
        Ok(keys.len())
    }
}

/// The text of the first `<field>…</field>` of an XML document (error bodies).
fn xml_field(xml: &str, field: &str) -> Option<String> {
    let start = xml.find(&format!("<{field}>"))? + field.len() + 2;
    let end = xml[start..].find(&format!("</{field}>"))? + start;
    Some(xml[start..end].to_string())
}
