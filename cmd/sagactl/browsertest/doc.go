// Package browsertest drives `sagactl console` in headless Chromium (chromedp) against
// the demo saga running in the test: the three services in process on the test
// Postgres, Redis and Kafka-protocol broker, and the console as its own process.
//
// It is a module of its own so that chromedp stays out of choreo's go.mod. Run it with
// `make console-test` (which installs Debian's chromium when it is missing); with
// CONSOLE_SCREENSHOTS=DIR it writes the pages' screenshots there (`make
// console-screenshots` writes docs/console-*.png).
package browsertest
