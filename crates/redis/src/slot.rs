//! Redis Cluster key slots: which keys one script may touch together.
//!
//! The `redis` crate routes by slot but does not expose the computation, and grouping a
//! layered decision's keys needs it before anything is sent.

/// The cluster slot of `key`: CRC16-XMODEM of the key, or of its hash tag, mod 16384.
pub(crate) fn slot(key: &[u8]) -> u16 {
    crc16(hash_tag(key)) % 16384
}

/// The part of `key` that is hashed: the text between the first `{` and the first `}`
/// after it, when that is not empty; otherwise the whole key.
fn hash_tag(key: &[u8]) -> &[u8] {
    if let Some(open) = key.iter().position(|&b| b == b'{') {
        if let Some(len) = key[open + 1..].iter().position(|&b| b == b'}') {
            if len > 0 {
                return &key[open + 1..open + 1 + len];
            }
        }
    }
    key
}

/// CRC16-XMODEM: polynomial 0x1021, initial value 0, no reflection.
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cluster_specification_examples() {
        assert_eq!(crc16(b"123456789"), 0x31C3, "the spec's check value");
        assert_eq!(slot(b"{user1000}.following"), slot(b"{user1000}.followers"));
        assert_eq!(hash_tag(b"foo{}{bar}"), b"foo{}{bar}");
        assert_eq!(hash_tag(b"foo{{bar}}zap"), b"{bar");
        assert_eq!(hash_tag(b"foo{bar}{zap}"), b"bar");
        assert_eq!(hash_tag(b"{}abc"), b"{}abc");
        // Slots `redis-cli CLUSTER KEYSLOT` reports.
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"bar"), 5061);
    }

    /// Fuzzing against Redis itself: `CLUSTER KEYSLOT` of arbitrary byte keys, odd braces
    /// and huge keys included, on a real cluster-enabled `redis-server`.
    #[cfg(feature = "testing")]
    mod fuzz {
        use super::*;
        use crate::testing::Server;
        use proptest::prelude::*;

        fn key() -> impl Strategy<Value = Vec<u8>> {
            prop_oneof![
                prop::collection::vec(any::<u8>(), 0..64),
                prop::collection::vec(
                    prop_oneof![Just(b'{'), Just(b'}'), Just(b'|'), any::<u8>()],
                    0..24
                ),
                (any::<u8>(), 1_000..70_000usize).prop_map(|(b, n)| vec![b; n]),
            ]
        }

        #[test]
        fn slots_match_redis_on_arbitrary_keys() {
            let dir =
                std::env::temp_dir().join(format!("ratewarden-slot-fuzz-{}", std::process::id()));
            let config = dir.join("nodes.conf");
            std::fs::create_dir_all(&dir).unwrap();
            let server = Server::start_with(&[
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                config.to_str().unwrap(),
            ]);
            // The runner's closure is `Fn`: the connection is borrowed mutably per case.
            let redis = std::cell::RefCell::new(
                redis::Client::open(server.url())
                    .and_then(|c| c.get_connection())
                    .expect("connecting to our redis-server"),
            );
            let mut runner =
                proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(2048));
            runner
                .run(&key(), |key| {
                    let want: u16 = redis::cmd("CLUSTER")
                        .arg("KEYSLOT")
                        .arg(&key[..])
                        .query(&mut *redis.borrow_mut())
                        .map_err(|e| TestCaseError::fail(e.to_string()))?;
                    prop_assert_eq!(slot(&key), want, "key {:?}", String::from_utf8_lossy(&key));
                    Ok(())
                })
                .unwrap();
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}
