package main

import (
	"errors"
	"net/url"
)

// redactURL returns raw without its user:password, for anything sagactl prints or
// serves: a URL given with credentials (ORDER_URL, -metrics) is used as given but
// never shown with them.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	u.User = nil
	return u.String()
}

// withoutURL returns the error inside a *url.Error (net/http's request errors), whose
// text repeats the request URL with its user name.
func withoutURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
