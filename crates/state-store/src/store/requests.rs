//! The thin request helpers every operation of the store uses: a call with
//! the store's retries (reads counted), transactions, conditional updates,
//! item reads and deletes, and queries by key and range.

use super::*;

impl StateStore {
    /// Sends a request with the store's retries; a lost condition is counted.
    pub(crate) async fn call<T, E, R, F, Fut>(
        &self,
        operation: &'static str,
        send: F,
    ) -> Result<T, CallError<E>>
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
        R: std::fmt::Debug + 'static,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, SdkError<E, R>>>,
    {
        let stopped = || self.is_stopped();
        let out = with_retries(
            &self.retry_policy(),
            Service::DynamoDb,
            operation,
            stopped,
            send,
        )
        .await;
        if let Err(CallError::Condition(_)) = &out {
            self.inner.lost_conditions.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(operation, group = %self.inner.pk, "condition not met");
        }
        out
    }

    /// Adds the read units a read's answer reported to the store's count.
    fn count_read(&self, consumed: Option<&aws_sdk_dynamodb::types::ConsumedCapacity>) {
        if let Some(units) = consumed.and_then(|c| c.capacity_units) {
            let milli = (units * 1000.0).round().max(0.0) as u64;
            self.inner
                .read_milliunits
                .fetch_add(milli, Ordering::Relaxed);
        }
    }

    /// Like [`StateStore::call`] for calls that have no condition.
    pub(crate) async fn call_plain<T, E, R, F, Fut>(
        &self,
        operation: &'static str,
        send: F,
    ) -> Result<T>
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
        R: std::fmt::Debug + 'static,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, SdkError<E, R>>>,
    {
        match self.call(operation, send).await {
            Ok(out) => Ok(out),
            Err(CallError::Failed(e)) => Err(e),
            Err(CallError::Condition(e)) => Err(StateError::Sdk {
                service: Service::DynamoDb,
                operation,
                code: e.code().map(str::to_owned),
                message: crate::retry::error_chain(&e),
            }),
        }
    }

    /// An UpdateItem on one item of this group, returning the new item.
    pub(crate) fn update_req(
        &self,
        at: &At,
        expr: &Expr,
        update: &str,
        condition: Option<&str>,
    ) -> UpdateItemFluentBuilder {
        let expr = expr.used_in(&[update, condition.unwrap_or("")]);
        self.client()
            .update_item()
            .table_name(self.table_name())
            .key(PK, s(&at.pk))
            .key(SK, s(&at.sk))
            .update_expression(update)
            .set_condition_expression(condition.map(str::to_owned))
            .set_expression_attribute_names(expr.names_opt())
            .set_expression_attribute_values(expr.values_opt())
            .return_values(ReturnValue::AllNew)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
    }

    /// An Update of one item of this group as one part of a transaction.
    pub(crate) fn tx_update(
        &self,
        at: &At,
        expr: &Expr,
        update: &str,
        condition: Option<&str>,
    ) -> Result<TransactWriteItem> {
        let expr = expr.used_in(&[update, condition.unwrap_or("")]);
        let update = Update::builder()
            .table_name(self.table_name())
            .key(PK, s(&at.pk))
            .key(SK, s(&at.sk))
            .update_expression(update)
            .set_condition_expression(condition.map(str::to_owned))
            .set_expression_attribute_names(expr.names_opt())
            .set_expression_attribute_values(expr.values_opt())
            .build()
            .map_err(|e| StateError::validation("transaction", e.to_string()))?;
        Ok(TransactWriteItem::builder().update(update).build())
    }

    /// A ConditionCheck of one item of this group as one part of a transaction.
    pub(crate) fn tx_check(
        &self,
        at: &At,
        expr: &Expr,
        condition: &str,
    ) -> Result<TransactWriteItem> {
        let expr = expr.used_in(&[condition]);
        let check = ConditionCheck::builder()
            .table_name(self.table_name())
            .key(PK, s(&at.pk))
            .key(SK, s(&at.sk))
            .condition_expression(condition)
            .set_expression_attribute_names(expr.names_opt())
            .set_expression_attribute_values(expr.values_opt())
            .build()
            .map_err(|e| StateError::validation("transaction", e.to_string()))?;
        Ok(TransactWriteItem::builder().condition_check(check).build())
    }

    /// Sends a TransactWriteItems: `Ok(Ok(()))` when it applied,
    /// `Ok(Err(codes))` when it was cancelled, with each part's
    /// cancellation code (`"None"` where that part passed; empty when the
    /// server named no reasons). Nothing is written when cancelled.
    pub(crate) async fn transact(
        &self,
        items: Vec<TransactWriteItem>,
    ) -> Result<std::result::Result<(), Vec<String>>> {
        self.transact_as(items, None).await
    }

    /// [`StateStore::transact`] with a client request token, which makes the
    /// call idempotent: "multiple identical calls have the same effect as
    /// one single call", for 10 minutes after the first completed (DynamoDB
    /// API Reference, TransactWriteItems, `ClientRequestToken`,
    /// <https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html>).
    /// A retry after a lost answer is answered as the first attempt was,
    /// where the parts' own conditions would refuse it (the write moved
    /// what they check). `token`: 1 to 36 characters, derived from every
    /// parameter of the call (the same token with other parameters is
    /// refused, `IdempotentParameterMismatchException`).
    pub(crate) async fn transact_idempotent(
        &self,
        items: Vec<TransactWriteItem>,
        token: &str,
    ) -> Result<std::result::Result<(), Vec<String>>> {
        self.transact_as(items, Some(token.to_owned())).await
    }

    async fn transact_as(
        &self,
        items: Vec<TransactWriteItem>,
        token: Option<String>,
    ) -> Result<std::result::Result<(), Vec<String>>> {
        let req = self
            .client()
            .transact_write_items()
            .set_client_request_token(token)
            .set_transact_items(Some(items));
        match self.call("TransactWriteItems", || req.clone().send()).await {
            Ok(_) => Ok(Ok(())),
            Err(CallError::Failed(e)) => Err(e),
            Err(CallError::Condition(e)) => {
                let codes = match &e {
                    TransactWriteItemsError::TransactionCanceledException(c) => c
                        .cancellation_reasons()
                        .iter()
                        .map(|r| r.code().unwrap_or("None").to_owned())
                        .collect(),
                    _ => Vec::new(),
                };
                Ok(Err(codes))
            }
        }
    }

    /// Sends a conditional update: `Ok(Ok(new item))` when it applied,
    /// `Ok(Err(old item))` when the condition failed (`None` if there was no item).
    pub(crate) async fn conditional_update(
        &self,
        req: UpdateItemFluentBuilder,
    ) -> Result<std::result::Result<RawItem, Option<RawItem>>> {
        match self.call("UpdateItem", || req.clone().send()).await {
            Ok(out) => Ok(Ok(out.attributes.unwrap_or_default())),
            Err(CallError::Failed(e)) => Err(e),
            Err(CallError::Condition(UpdateItemError::ConditionalCheckFailedException(e))) => {
                Ok(Err(e.item))
            }
            Err(CallError::Condition(_)) => Ok(Err(None)),
        }
    }

    /// A strongly consistent GetItem of one item of this group.
    pub(crate) async fn get_item(&self, at: &At) -> Result<Option<RawItem>> {
        let req = self
            .client()
            .get_item()
            .table_name(self.table_name())
            .key(PK, s(&at.pk))
            .key(SK, s(&at.sk))
            .consistent_read(true)
            .return_consumed_capacity(ReturnConsumedCapacity::Total);
        let out = self.call_plain("GetItem", || req.clone().send()).await?;
        self.count_read(out.consumed_capacity.as_ref());
        Ok(out.item)
    }

    /// A DeleteItem of one item of this group, optionally conditional:
    /// `true` if it was deleted (or there was nothing and no condition).
    pub(crate) async fn delete_item(
        &self,
        at: &At,
        condition: Option<&str>,
        expr: &Expr,
    ) -> Result<bool> {
        let expr = expr.used_in(&[condition.unwrap_or("")]);
        let req = self
            .client()
            .delete_item()
            .table_name(self.table_name())
            .key(PK, s(&at.pk))
            .key(SK, s(&at.sk))
            .set_condition_expression(condition.map(str::to_owned))
            .set_expression_attribute_names(expr.names_opt())
            .set_expression_attribute_values(expr.values_opt());
        match self.call("DeleteItem", || req.clone().send()).await {
            Ok(_) => Ok(true),
            Err(CallError::Condition(_)) => Ok(false),
            Err(CallError::Failed(e)) => Err(e),
        }
    }

    /// Every item under the home key whose sort key starts with `prefix`
    /// (strongly consistent, paginated).
    pub(crate) async fn query_home(&self, prefix: &str) -> Result<Vec<RawItem>> {
        self.query_key(&self.inner.pk, prefix).await
    }

    /// Every item under partition key `pk` whose sort key starts with
    /// `prefix` (strongly consistent, paginated).
    pub(crate) async fn query_key(&self, pk: &str, prefix: &str) -> Result<Vec<RawItem>> {
        let range = if prefix.is_empty() {
            SkRange::All
        } else {
            SkRange::Prefix(prefix.to_owned())
        };
        self.query_range(pk, &range, true).await
    }

    /// Every item under partition key `pk` whose sort key lies in `range`
    /// (paginated; `consistent`: strongly consistent, else eventually, at
    /// half the read units).
    pub(crate) async fn query_range(
        &self,
        pk: &str,
        range: &SkRange,
        consistent: bool,
    ) -> Result<Vec<RawItem>> {
        let mut items = Vec::new();
        let mut start: Option<RawItem> = None;
        loop {
            let mut req = self
                .client()
                .query()
                .table_name(self.table_name())
                .consistent_read(consistent)
                .return_consumed_capacity(ReturnConsumedCapacity::Total)
                .expression_attribute_names("#pk", PK)
                .expression_attribute_values(":pk", s(pk))
                .set_exclusive_start_key(start.take());
            req = match range {
                SkRange::All => req.key_condition_expression("#pk = :pk"),
                SkRange::Prefix(prefix) => req
                    .key_condition_expression("#pk = :pk AND begins_with(#sk, :from)")
                    .expression_attribute_names("#sk", SK)
                    .expression_attribute_values(":from", s(prefix.as_str())),
                SkRange::Between(from, to) => req
                    .key_condition_expression("#pk = :pk AND #sk BETWEEN :from AND :to")
                    .expression_attribute_names("#sk", SK)
                    .expression_attribute_values(":from", s(*from))
                    .expression_attribute_values(":to", s(*to)),
                SkRange::From(from) => req
                    .key_condition_expression("#pk = :pk AND #sk >= :from")
                    .expression_attribute_names("#sk", SK)
                    .expression_attribute_values(":from", s(*from)),
            };
            let out = self.call_plain("Query", || req.clone().send()).await?;
            self.count_read(out.consumed_capacity.as_ref());
            items.extend(out.items.unwrap_or_default());
            match out.last_evaluated_key {
                Some(key) if !key.is_empty() => start = Some(key),
                _ => return Ok(items),
            }
        }
    }
}
