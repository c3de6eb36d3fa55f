package paymentsvc

import _ "embed"

// Schema is the payment service's own SQL schema (tables payment_customers,
// payment_orders, payment_ledger), applied at start by Run. It is idempotent.
//
//go:embed schema.sql
var Schema string
