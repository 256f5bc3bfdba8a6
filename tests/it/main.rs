mod fingerprint;
mod common;
mod cli_apply;
mod load_errors;
mod backfill;
mod examples;
mod names;
