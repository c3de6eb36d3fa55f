package inventorysvc

import _ "embed"

// Schema is the inventory service's own SQL schema (tables inventory_stock,
// inventory_reservations, inventory_reservation_items), applied at start by Run. It is
// idempotent.
//
//go:embed schema.sql
var Schema string
