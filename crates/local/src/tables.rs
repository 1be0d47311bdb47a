//! Plain tables the tests, the demo and the example application need beside
//! the state table: one string hash key, on demand, optionally with a
//! stream of new and old images.

use aws_sdk_dynamodb::operation::create_table::CreateTableOutput;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
    StreamSpecification, StreamViewType,
};

/// Creates the table `name` keyed by the string attribute `key`
/// (pay per request), with a `NEW_AND_OLD_IMAGES` stream if `stream`.
pub async fn create_keyed_table(
    dynamodb: &aws_sdk_dynamodb::Client,
    name: &str,
    key: &str,
    stream: bool,
) -> Result<CreateTableOutput, aws_sdk_dynamodb::Error> {
    let built = "a key schema with its name and type set";
    let mut request = dynamodb
        .create_table()
        .table_name(name)
        .billing_mode(BillingMode::PayPerRequest)
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name(key)
                .key_type(KeyType::Hash)
                .build()
                .expect(built),
        )
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name(key)
                .attribute_type(ScalarAttributeType::S)
                .build()
                .expect(built),
        );
    if stream {
        request = request.stream_specification(
            StreamSpecification::builder()
                .stream_enabled(true)
                .stream_view_type(StreamViewType::NewAndOldImages)
                .build()
                .expect(built),
        );
    }
    Ok(request.send().await?)
}
