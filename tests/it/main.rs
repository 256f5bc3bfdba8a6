mod fingerprint;
