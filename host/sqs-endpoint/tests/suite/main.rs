//! The SQS/SNS endpoint's integration tests, one binary: the AWS SDK and
//! the query protocol, two endpoints on one store, and SNS.

mod sdk;
mod shared;
mod sns;
