package ordersvc

import (
	"mime"
	"net/http"
)

// crossOrigin is the check of the browser's fetch metadata: Sec-Fetch-Site, or else
// Origin against Host (net/http's CrossOriginProtection). It holds no configuration.
var crossOrigin = http.NewCrossOriginProtection()

// sameSiteJSON guards a state-changing route against requests a page of another site
// can make a browser send without a CORS preflight: one whose fetch metadata says it is
// cross-site (Sec-Fetch-Site other than same-origin or none, or an Origin that is not
// the Host) is answered 403 cross_site; one with a body or a Content-Type other than
// application/json is answered 415 (a cross-site page can send text/plain and the form
// encodings, never application/json, without a preflight). Requests of non-browser
// clients (curl, sagactl) carry neither header and pass.
func sameSiteJSON(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := crossOrigin.Check(r); err != nil {
			writeError(w, http.StatusForbidden, CodeCrossSite, "cross-site requests cannot change orders")
			return
		}
		ct := r.Header.Get("Content-Type")
		if ct == "" && r.ContentLength == 0 {
			next(w, r)
			return
		}
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			writeError(w, http.StatusUnsupportedMediaType, CodeInvalidRequest, "Content-Type must be application/json")
			return
		}
		next(w, r)
	}
}
