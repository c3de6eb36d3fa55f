package main

import (
	"errors"
	"net/url"
	"strings"
)

// redactURL returns raw without its user:password and fragment, with the value of every
// query parameter replaced by "redacted" (a token in ?token=... or ?api_key=...; a bare
// ?secret is replaced whole), for anything sagactl prints or serves: a URL given with
// credentials (ORDER_URL, -metrics) is used as given but never shown with them.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	u.User = nil
	if u.RawQuery != "" {
		parts := strings.Split(u.RawQuery, "&")
		for i, p := range parts {
			if k, _, ok := strings.Cut(p, "="); ok {
				parts[i] = k + "=redacted"
			} else if p != "" {
				parts[i] = "redacted" // a bare ?secret
			}
		}
		u.RawQuery = strings.Join(parts, "&")
	}
	u.Fragment, u.RawFragment = "", ""
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
