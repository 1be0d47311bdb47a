//! The configuration read from a map of variables: defaults, overrides,
//! and errors that name the variable.

use super::*;
use crate::pipeline::InitialPosition;
use crate::state::Buckets;
use std::collections::HashMap;
use std::time::Duration;

fn config(vars: &[(&str, &str)]) -> Result<ScheduledConfig, ConfigError> {
    let map: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    ScheduledConfig::from_lookup(|k| map.get(k).cloned()).map_err(|e| match e {
        crate::Error::Config(e) => e,
        other => panic!("not a configuration error: {other}"),
    })
}

#[test]
fn defaults_and_overrides() {
    let c = config(&[(GROUP, "billing"), (STREAM, "orders")]).unwrap();
    assert_eq!(c.store.table, "shardkeeper-state");
    assert_eq!(c.timing.tick, Duration::from_secs(5));
    assert_eq!(c.lease_term, Duration::from_secs(10));
    assert_eq!(c.rebalance.max_moves_per_tick, None);
    assert!(c.rebalance.balance_load);
    assert_eq!(c.reap.retention, Duration::from_secs(86_400));
    let c = config(&[
        (GROUP, "billing"),
        (STREAM, "orders"),
        (TABLE, "my-state"),
        (MAX_MOVES_PER_TICK, "2"),
        (TICK_SECONDS, "10"),
        (BALANCE_LOAD, "False"),
    ])
    .unwrap();
    assert!(!c.rebalance.balance_load);
    let err = config(&[
        (GROUP, "billing"),
        (STREAM, "orders"),
        (BALANCE_LOAD, "yes"),
    ])
    .unwrap_err()
    .to_string();
    assert!(err.contains("SHARDKEEPER_BALANCE_LOAD"), "{err}");
    assert_eq!(c.store.table, "my-state");
    assert_eq!(c.rebalance.max_moves_per_tick, Some(2));
    assert_eq!(c.timing.tick, Duration::from_secs(10));
    assert!(
        c.worker_config().enhanced_fan_out.is_none(),
        "polls by default"
    );
}

#[test]
fn the_initial_position_is_read_and_checked() {
    let base = [(GROUP, "billing"), (STREAM, "orders")];
    let at = |v: &str| {
        let mut vars = base.to_vec();
        vars.push((INITIAL_POSITION, v));
        config(&vars)
    };
    assert_eq!(
        config(&base).unwrap().worker_config().initial_position,
        InitialPosition::TrimHorizon
    );
    assert_eq!(
        at("LATEST").unwrap().worker_config().initial_position,
        InitialPosition::Latest
    );
    assert_eq!(
        at("AT_TIMESTAMP:1700000000000").unwrap().initial_position,
        InitialPosition::AtTimestamp(1_700_000_000_000)
    );
    for bad in ["latest", "AT_TIMESTAMP:soon", "NOW"] {
        let err = at(bad).unwrap_err().to_string();
        assert!(err.contains("SHARDKEEPER_INITIAL_POSITION"), "{err}");
    }
}

#[test]
fn the_efo_pool_size_turns_on_enhanced_fan_out_within_the_kinesis_limit() {
    let c = config(&[(GROUP, "billing"), (STREAM, "orders"), (EFO_POOL_SIZE, "3")]).unwrap();
    let pool = c.worker_config().enhanced_fan_out.unwrap();
    assert_eq!((pool.prefix.as_str(), pool.size), ("billing", 3));
    let err = config(&[
        (GROUP, "billing"),
        (STREAM, "orders"),
        (EFO_POOL_SIZE, "21"),
    ])
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("SHARDKEEPER_EFO_POOL_SIZE") && err.contains("20"),
        "{err}"
    );
}

#[test]
fn missing_and_malformed_variables_are_named() {
    assert_eq!(
        config(&[(STREAM, "orders")]).unwrap_err(),
        ConfigError::Missing { var: GROUP }
    );
    let err = config(&[(GROUP, "g"), (STREAM, "orders"), (TICK_SECONDS, "soon")]).unwrap_err();
    assert!(
        err.to_string()
            .contains("SHARDKEEPER_TICK_SECONDS=\"soon\""),
        "{err}"
    );
    let err = config(&[(GROUP, "g"), (STREAM, "orders"), (LEASE_TERM_SECONDS, "0")]).unwrap_err();
    assert!(matches!(
        err,
        ConfigError::Malformed {
            var: LEASE_TERM_SECONDS,
            ..
        }
    ));
    let err = config(&[(GROUP, "a#b"), (STREAM, "orders")]).unwrap_err();
    assert!(
        matches!(err, ConfigError::Malformed { var: GROUP, .. }),
        "{err}"
    );
    let err = config(&[(GROUP, "g"), (STREAM, "bad stream")]).unwrap_err();
    assert!(
        matches!(err, ConfigError::Malformed { var: STREAM, .. }),
        "{err}"
    );
}

#[test]
fn the_stream_is_a_name_or_an_arn_of_the_functions_region() {
    let arn = "arn:aws:kinesis:eu-west-1:210987654321:stream/orders";
    let by_arn = config(&[(GROUP, "g"), (STREAM, arn), ("AWS_REGION", "eu-west-1")]).unwrap();
    assert_eq!(by_arn.store.stream.arn().map(|a| a.as_str()), Some(arn));
    assert_eq!(by_arn.store.stream.name().as_str(), "orders");
    let by_name = config(&[(GROUP, "g"), (STREAM, "orders")]).unwrap();
    assert_eq!(by_name.store.stream.arn(), None);
    assert_eq!(
        by_name.store.stream.name(),
        by_arn.store.stream.name(),
        "one state for both"
    );
    let elsewhere = config(&[(GROUP, "g"), (STREAM, arn), ("AWS_REGION", "us-east-1")]);
    match elsewhere.unwrap_err() {
        ConfigError::Malformed { var, reason, .. } => {
            assert_eq!(var, STREAM);
            assert!(
                reason.contains("eu-west-1") && reason.contains("us-east-1"),
                "{reason}"
            );
        }
        other => panic!("{other}"),
    }
    let err = config(&[
        (GROUP, "g"),
        (STREAM, "arn:aws:kinesis:eu-west-1:42:stream/orders"),
    ])
    .unwrap_err();
    assert!(
        matches!(&err, ConfigError::Malformed { var: STREAM, reason, .. } if reason.contains("12 digits")),
        "{err}"
    );
}

#[test]
fn the_bucket_count_is_a_power_of_two_or_chosen_later() {
    let base = [(GROUP, "g"), (STREAM, "orders")];
    assert_eq!(config(&base).unwrap().buckets, None);
    let set = config(&[base[0], base[1], (BUCKETS, "64")]).unwrap();
    assert_eq!(set.buckets, Some(Buckets::new(64).unwrap()));
    for bad in ["0", "48", "2048", "many"] {
        let err = config(&[base[0], base[1], (BUCKETS, bad)]).unwrap_err();
        assert!(
            matches!(err, ConfigError::Malformed { var: BUCKETS, .. }),
            "{bad}: {err}"
        );
        assert!(err.to_string().contains("power of two"), "{err}");
    }
    let lookup = |vars: &'static [(&'static str, &'static str)]| {
        move |k: &str| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| (*v).to_owned())
        }
    };
    let processors = processor_store_config(lookup(&[(GROUP, "g"), (STREAM, "orders")]));
    assert_eq!(processors.unwrap().buckets.count(), PROCESSOR_BUCKETS);
    let chosen =
        processor_store_config(lookup(&[(GROUP, "g"), (STREAM, "orders"), (BUCKETS, "8")]));
    assert_eq!(chosen.unwrap().buckets.count(), 8);
}

#[test]
fn a_heartbeat_timeout_shorter_than_the_term_plus_a_renewal_interval_is_refused() {
    let base = [(GROUP, "g"), (STREAM, "orders"), (LEASE_TERM_SECONDS, "10")];
    let with = |timeout: &'static str| {
        let mut vars = base.to_vec();
        vars.push((HEARTBEAT_TIMEOUT_SECONDS, timeout));
        config(&vars)
    };
    // The worker heartbeats every 3 s: 10 s + 3 s is the least.
    let err = with("12").unwrap_err();
    assert!(
        matches!(&err, ConfigError::Malformed { var: HEARTBEAT_TIMEOUT_SECONDS, reason, .. }
            if reason.contains("13 s")),
        "{err}"
    );
    assert_eq!(
        with("13").unwrap().reap.heartbeat_timeout,
        Duration::from_secs(13)
    );
    // The default follows the term.
    let long = config(&[(GROUP, "g"), (STREAM, "orders"), (LEASE_TERM_SECONDS, "30")]).unwrap();
    assert_eq!(long.rebalance.heartbeat_timeout, Duration::from_secs(35));
    assert_eq!(long.reap.lease_term, Duration::from_secs(30));
}

fn processor(vars: &[(&str, &str)]) -> Result<ProcessorConfig, ConfigError> {
    let map: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    ProcessorConfig::from_lookup(|k| map.get(k).cloned()).map_err(|e| match e {
        crate::Error::Config(e) => e,
        other => panic!("not a configuration error: {other}"),
    })
}

#[test]
fn a_processor_parks_after_its_attempts_in_the_table_or_a_dead_letter_stream() {
    let base = [(GROUP, "orders-esm"), (STREAM, "orders")];
    let c = processor(&base).unwrap();
    assert_eq!((c.max_attempts, c.dead_letter_stream.is_none()), (3, true));
    assert_eq!(c.store.buckets.count(), PROCESSOR_BUCKETS);
    let c = processor(&[
        base[0],
        base[1],
        (MAX_ATTEMPTS, "5"),
        (DEAD_LETTER_STREAM, "parked"),
    ])
    .unwrap();
    assert_eq!(c.max_attempts, 5);
    assert_eq!(c.dead_letter_stream.unwrap().name().as_str(), "parked");
    let arn = "arn:aws:kinesis:eu-west-1:123456789012:stream/parked";
    let c = processor(&[base[0], base[1], (DEAD_LETTER_STREAM, arn)]).unwrap();
    assert!(c.dead_letter_stream.unwrap().arn().is_some());

    for (var, value) in [
        (MAX_ATTEMPTS, "0"),
        (MAX_ATTEMPTS, "three"),
        (MAX_ATTEMPTS, "5000000000"),
        (DEAD_LETTER_STREAM, "no spaces allowed"),
        (DEAD_LETTER_STREAM, "arn:aws:kinesis:nowhere"),
    ] {
        let e = processor(&[base[0], base[1], (var, value)]).unwrap_err();
        assert!(
            matches!(&e, ConfigError::Malformed { var: v, .. } if *v == var),
            "{var}={value}: {e}"
        );
    }
    assert_eq!(
        processor(&[base[0]]).unwrap_err(),
        ConfigError::Missing { var: STREAM }
    );
}

#[test]
fn concurrency_is_read_by_processors_and_shard_workers_and_zero_is_refused() {
    let base = [(GROUP, "orders"), (STREAM, "orders")];
    assert_eq!(processor(&base).unwrap().concurrency, 1);
    assert_eq!(
        config(&base)
            .unwrap()
            .worker_config()
            .processing
            .concurrency,
        1
    );
    let with = [base[0], base[1], (CONCURRENCY, "64")];
    assert_eq!(processor(&with).unwrap().concurrency, 64);
    assert_eq!(
        config(&with)
            .unwrap()
            .worker_config()
            .processing
            .concurrency,
        64
    );
    for value in ["0", "many", "-1"] {
        let with = [base[0], base[1], (CONCURRENCY, value)];
        for e in [processor(&with).unwrap_err(), config(&with).unwrap_err()] {
            assert!(
                matches!(&e, ConfigError::Malformed { var, .. } if *var == CONCURRENCY),
                "{value}: {e}"
            );
        }
    }
}
