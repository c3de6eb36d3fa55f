package paymentsvc_test

import (
	"fmt"

	"github.com/choreo-saga/choreo/services/payment/paymentsvc"
)

// The PAYMENT_SEED_CUSTOMERS format: ID:BALANCE[:LIMIT] in cents, IDs may be ranges.
func ExampleParseCustomers() {
	cs, err := paymentsvc.ParseCustomers("c-1..c-3:10000000:100000,c-poor:100000:100")
	if err != nil {
		panic(err)
	}
	for _, c := range cs {
		fmt.Printf("%s balance=%d limit=%d\n", c.ID, c.Balance, c.Limit)
	}
	// Output:
	// c-1 balance=10000000 limit=100000
	// c-2 balance=10000000 limit=100000
	// c-3 balance=10000000 limit=100000
	// c-poor balance=100000 limit=100
}

// Money is conserved when every balance plus every captured amount adds up to the
// seeded total.
func ExampleAudit_Conserved() {
	a := paymentsvc.Audit{InitialTotal: 1000, BalanceTotal: 700, Captured: 250}
	fmt.Println(a.Conserved())
	// Output: paymentsvc: money not conserved: balances 700 + captured 250 != initial 1000
}
