//! A local S3-compatible server for the S3 lake tests: `moto` in server mode on a free port of
//! 127.0.0.1, never the internet. Buckets are created and listed through `boto3` (installed
//! with `moto[server]`, see `.ci/run`).
#![allow(dead_code)]

use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Credentials the tests hand to efmesh through the environment (moto accepts any).
pub const KEY_ID: &str = "efmesh-test-key";
/// The matching secret access key.
pub const SECRET: &str = "efmesh-test-secret-do-not-log";

/// A running moto server; stopped (by its own pid) when dropped.
pub struct Moto {
    child: Child,
    /// Its port on 127.0.0.1.
    pub port: u16,
}

impl Moto {
    /// Starts `python3 -m moto.server` on a free port and waits until it accepts connections.
    ///
    /// Panics (the test fails, it is never skipped) when moto is not installed.
    pub fn start() -> Moto {
        let port = TcpListener::bind("127.0.0.1:0").expect("free port").local_addr().expect("addr").port();
        let child = Command::new("python3")
            .args(["-m", "moto.server", "-H", "127.0.0.1", "-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("python3 must be installed to run the S3 tests");
        let mut moto = Moto { child, port };
        let deadline = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Some(status) = moto.child.try_wait().expect("try_wait") {
                let mut err = String::new();
                if let Some(mut e) = moto.child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut e, &mut err);
                }
                panic!("moto server exited ({status}): {err}\n  hint: `pip install 'moto[server]'` (.ci/run does)");
            }
            assert!(Instant::now() < deadline, "moto server did not listen on {port} within 60 s");
            std::thread::sleep(Duration::from_millis(50));
        }
        moto
    }

    /// `host:port` for `[lake] s3_endpoint`.
    pub fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn boto(&self, script: &str) -> String {
        let program = format!(
            "import boto3, sys, json\ns3 = boto3.client('s3', endpoint_url='http://127.0.0.1:{}', region_name='us-east-1', aws_access_key_id='{KEY_ID}', aws_secret_access_key='{SECRET}')\n{script}",
            self.port
        );
        let out = Command::new("python3").args(["-c", &program]).output().expect("python3");
        assert!(out.status.success(), "boto3 failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Creates `bucket`.
    pub fn create_bucket(&self, bucket: &str) {
        self.boto(&format!("s3.create_bucket(Bucket='{bucket}')"));
    }

    /// Every key of `bucket`, sorted.
    pub fn keys(&self, bucket: &str) -> Vec<String> {
        let out = self.boto(&format!(
            "keys = []\nfor page in s3.get_paginator('list_objects_v2').paginate(Bucket='{bucket}'):\n    keys += [o['Key'] for o in page.get('Contents', [])]\nprint(json.dumps(sorted(keys)))"
        ));
        serde_json::from_str(out.trim()).expect("key list")
    }

    /// Writes `text` to `bucket/key`.
    pub fn put(&self, bucket: &str, key: &str, text: &str) {
        self.boto(&format!("s3.put_object(Bucket='{bucket}', Key='{key}', Body={text:?})"));
    }

    /// Deletes `bucket/key` (as a user would, outside efmesh).
    pub fn delete(&self, bucket: &str, key: &str) {
        self.boto(&format!("s3.delete_object(Bucket='{bucket}', Key='{key}')"));
    }

    /// The content of `bucket/key` as text.
    pub fn get(&self, bucket: &str, key: &str) -> String {
        self.boto(&format!("sys.stdout.write(s3.get_object(Bucket='{bucket}', Key='{key}')['Body'].read().decode())"))
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
