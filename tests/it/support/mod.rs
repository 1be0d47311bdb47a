//! Set-up and helpers shared by the tests.

pub mod classes;
pub mod common;
pub mod consume;
pub mod ended;
pub mod esm;
pub mod faulty;
pub mod fixtures;
pub mod iam;
pub mod lambda_esm;
pub mod operator;
pub mod recorded;
pub mod s3;
