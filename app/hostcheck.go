package app

import (
	"net"
	"net/http"
	"strings"
)

// envHTTPAllowedHosts lists the host names the HTTP listeners answer to besides
// loopback names and IP addresses (see requireHost).
const envHTTPAllowedHosts = "HTTP_ALLOWED_HOSTS"

// requireHost returns h behind a check of the request's Host header: a request for a
// host name other than a loopback name ("localhost", "*.localhost"), an IP address or
// one of allowed is answered 421 Misdirected Request and never reaches h. An entry of
// allowed is a host name without port ("orders.example.com"), a suffix starting with a
// dot (".example.com" for every name under it) or "*" (any host: the check is off).
// A request without a Host header (HTTP/1.0) passes.
//
// A page of another site can make a browser reach a service on loopback or a private
// network by pointing a name of its own at the service's address (DNS rebinding); the
// browser then sends that name as Host, which the check refuses. IP addresses pass:
// rebinding needs a name.
func requireHost(allowed []string, h http.Handler) http.Handler {
	names := make(map[string]bool, len(allowed))
	var suffixes []string
	for _, a := range allowed {
		a = strings.ToLower(strings.TrimSuffix(strings.TrimSpace(a), "."))
		switch {
		case a == "*":
			return h
		case strings.HasPrefix(a, "."):
			suffixes = append(suffixes, a)
		case a != "":
			names[a] = true
		}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !hostAllowed(r.Host, names, suffixes) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Cache-Control", "no-store")
			w.WriteHeader(http.StatusMisdirectedRequest)
			_, _ = w.Write([]byte(`{"error":{"code":"misdirected","message":"this service answers only to loopback names, IP addresses and the names of ` +
				envHTTPAllowedHosts + `"}}` + "\n"))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// hostAllowed reports whether the Host header host ([name or IP][:port]) is a loopback
// name, an IP address, one of names or under one of suffixes.
func hostAllowed(host string, names map[string]bool, suffixes []string) bool {
	if host == "" {
		return true
	}
	if hh, _, err := net.SplitHostPort(host); err == nil {
		host = hh
	}
	host = strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
	if host == "localhost" || strings.HasSuffix(host, ".localhost") || net.ParseIP(host) != nil || names[host] {
		return true
	}
	for _, s := range suffixes {
		if strings.HasSuffix(host, s) {
			return true
		}
	}
	return false
}

// allowedHostsProblem returns why the HTTP_ALLOWED_HOSTS entries hosts are not host
// names, or "".
func allowedHostsProblem(hosts []string) string {
	for _, h := range hosts {
		if h == "*" {
			continue
		}
		if strings.ContainsAny(h, ":/@ ") || strings.Trim(h, ".") == "" {
			return "host names without port or scheme, comma-separated (.example.com for the names under it, * for any)"
		}
	}
	return ""
}
