# moto's DynamoDB server under concurrent requests on one table: a
# TransactWriteItems while other requests write the table fails with a 500
# (moto deep-copies the table and meets "dictionary changed size during
# iteration"), every attempt of it; and, second, a check of whether racing
# conditional writes on one item can both succeed.
#
#   pip install 'moto[server]==5.2.5' boto3
#   moto_server -p 5055 &
#   python docs/repro/moto_concurrent_transactions.py http://127.0.0.1:5055
import boto3, threading, sys
from botocore.exceptions import ClientError
ddb = boto3.client("dynamodb", endpoint_url=sys.argv[1], region_name="us-east-1",
                   aws_access_key_id="x", aws_secret_access_key="x")
t = "race"
try:
    ddb.create_table(TableName=t, BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}, {"AttributeName": "sk", "AttributeType": "S"}])
except ClientError:
    pass
for b in range(0, 5000, 25):
    ddb.batch_write_item(RequestItems={t: [{"PutRequest": {"Item": {"pk": {"S": "g"}, "sk": {"S": f"item{i}"}}}} for i in range(b, b + 25)]})
# 1. A transaction while other threads write: moto deep-copies the table and fails.
errors = []
def writer(n):
    for i in range(200):
        ddb.update_item(TableName=t, Key={"pk": {"S": "g"}, "sk": {"S": f"new{n}-{i}"}},
            UpdateExpression="SET #a = :v", ExpressionAttributeNames={"#a": "a"},
            ExpressionAttributeValues={":v": {"S": "x"}})
        ddb.delete_item(TableName=t, Key={"pk": {"S": "g"}, "sk": {"S": f"new{n}-{i}"}})
def transactor():
    for i in range(50):
        try:
            ddb.transact_write_items(TransactItems=[{"Update": {"TableName": t,
                "Key": {"pk": {"S": "g"}, "sk": {"S": "item1"}}, "UpdateExpression": "ADD n :one",
                "ExpressionAttributeValues": {":one": {"N": "1"}}}}])
        except Exception as e:
            errors.append(type(e).__name__ + ": " + str(e)[:80])
ts = [threading.Thread(target=writer, args=(n,)) for n in range(4)] + [threading.Thread(target=transactor) for _ in range(4)]
[x.start() for x in ts]; [x.join() for x in ts]
print("transactions failed:", len(errors), errors[:1])
# 2. Conditional puts racing for one item: more than one succeeds.
wins = []
def racer(n):
    try:
        ddb.update_item(TableName=t, Key={"pk": {"S": "lease"}, "sk": {"S": "l"}},
            UpdateExpression="SET #o = :me", ConditionExpression="attribute_not_exists(#o)",
            ExpressionAttributeNames={"#o": "owner"}, ExpressionAttributeValues={":me": {"S": f"c{n}"}})
        wins.append(n)
    except ClientError:
        pass
for round in range(20):
    ddb.delete_item(TableName=t, Key={"pk": {"S": "lease"}, "sk": {"S": "l"}})
    wins.clear()
    rs = [threading.Thread(target=racer, args=(n,)) for n in range(16)]
    [x.start() for x in rs]; [x.join() for x in rs]
    if len(wins) > 1:
        print(f"round {round}: {len(wins)} conditional writes on attribute_not_exists won")
        break
else:
    print("no double win in 20 rounds")
