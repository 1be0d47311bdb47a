//! An item of a KCL lease table, as `import-kcl` reads it (KCL 2.x and
//! 3.x leases, other entity types, damaged items). The input is the item
//! in DynamoDB JSON.
//!
//! Checked: an item reads as a lease, as another entity (skipped), or as
//! an error, never a panic; a lease's checkpoints show as text.

use shardkeeper_cli::kcl::KclLease;

/// One input.
pub fn run(data: &[u8]) {
    let Some(item) = super::dynamodb_item(data) else {
        return;
    };
    match KclLease::from_item(&item) {
        Ok(Some(lease)) => {
            assert!(!lease.checkpoint.to_string().is_empty());
            if let Some(pending) = &lease.pending {
                assert!(!pending.to_string().is_empty());
            }
        }
        Ok(None) => {}
        Err(e) => assert!(!e.to_string().is_empty()),
    }
}
