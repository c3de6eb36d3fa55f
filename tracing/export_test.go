package tracing

// SpanAttributesForTest exposes spanAttributes to the package's external tests.
var SpanAttributesForTest = spanAttributes
