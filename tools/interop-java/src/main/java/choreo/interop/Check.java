package choreo.interop;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.cloudevents.CloudEvent;
import io.cloudevents.core.builder.CloudEventBuilder;
import io.cloudevents.core.message.Encoding;
import io.cloudevents.jackson.JsonFormat;
import io.cloudevents.kafka.CloudEventDeserializer;
import io.cloudevents.kafka.CloudEventSerializer;
import java.io.ByteArrayOutputStream;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.KeyFactory;
import java.security.PublicKey;
import java.security.Signature;
import java.security.spec.X509EncodedKeySpec;
import java.time.Duration;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.UUID;
import java.util.regex.Pattern;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * The Java side of the interop check, on stock kafka-clients and the CloudEvents Java SDK's
 * Kafka binding.
 *
 * <pre>
 * read  BROKERS TOPIC EXPECT [PUBKEY.pem]  reads every record of TOPIC with CloudEventDeserializer
 *                                          and checks each is a valid choreo event (extensions,
 *                                          key, traceparent, signature); exit 0 when EXPECT
 *                                          records were read and all passed
 * write BROKERS TOPIC N REPLY_TOPIC         writes N order.confirmed events in binary and N in
 *                                          structured content mode with CloudEventSerializer,
 *                                          then reads REPLY_TOPIC until each has its
 *                                          shipment.scheduled (caused by it, same correlation
 *                                          id); exit 0 when all 2N were answered
 * </pre>
 *
 * TIMEOUT_SECONDS (default 120) bounds each wait.
 */
public final class Check {
  private static final Duration TIMEOUT =
      Duration.ofSeconds(Long.parseLong(System.getenv().getOrDefault("TIMEOUT_SECONDS", "120")));
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final Pattern TRACEPARENT =
      Pattern.compile("^00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]$");

  /** The headers choreo_signature covers, in order (event/sign.go). */
  private static final String[] SIGNED = {
    "ce_specversion", "ce_id", "ce_type", "ce_source", "ce_subject", "ce_time",
    "ce_correlationid", "ce_causationid", "ce_dataschemaversion", "content-type"
  };

  public static void main(String[] args) throws Exception {
    int status;
    if (args.length >= 4 && args[0].equals("read")) {
      status = read(args[1], args[2], Integer.parseInt(args[3]), args.length > 4 ? args[4] : null);
    } else if (args.length == 5 && args[0].equals("write")) {
      status = write(args[1], args[2], Integer.parseInt(args[3]), args[4]);
    } else {
      System.err.println("usage: read BROKERS TOPIC EXPECT [PUBKEY.pem] | write BROKERS TOPIC N REPLY_TOPIC");
      status = 2;
    }
    System.exit(status);
  }

  private static KafkaConsumer<String, CloudEvent> consumer(String brokers, String topic) {
    Properties p = new Properties();
    p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, brokers);
    p.put(ConsumerConfig.GROUP_ID_CONFIG, "choreo-interop-java-" + UUID.randomUUID());
    p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
    p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
    KafkaConsumer<String, CloudEvent> c =
        new KafkaConsumer<>(p, new StringDeserializer(), new CloudEventDeserializer());
    c.subscribe(List.of(topic));
    return c;
  }

  private static int read(String brokers, String topic, int expect, String pubkeyFile)
      throws Exception {
    PublicKey key = null;
    if (pubkeyFile != null) {
      String pem = Files.readString(Path.of(pubkeyFile)).replaceAll("-----[A-Z ]+-----|\\s", "");
      key = KeyFactory.getInstance("Ed25519")
          .generatePublic(new X509EncodedKeySpec(Base64.getDecoder().decode(pem)));
    }
    int ok = 0;
    List<String> bad = new ArrayList<>();
    Map<String, Integer> types = new TreeMap<>();
    long deadline = System.nanoTime() + TIMEOUT.toNanos();
    try (KafkaConsumer<String, CloudEvent> c = consumer(brokers, topic)) {
      while (ok + bad.size() < expect && System.nanoTime() < deadline) {
        for (ConsumerRecord<String, CloudEvent> r : c.poll(Duration.ofMillis(500))) {
          try {
            CloudEvent ce = r.value();
            check(r, ce, key);
            types.merge(ce.getType(), 1, Integer::sum);
            ok++;
          } catch (Exception e) {
            bad.add(r.topic() + "[" + r.partition() + "]@" + r.offset() + ": " + e.getMessage());
          }
        }
      }
    }
    System.out.printf(
        "java kafka-clients + cloudevents-kafka: read %d of %d records of %s; %d valid CloudEvents"
            + " (binary mode%s): %s%n",
        ok + bad.size(), expect, topic,
        ok, key != null ? ", signature verified" : "", types);
    bad.stream().limit(10).forEach(b -> System.out.println("  invalid: " + b));
    return bad.isEmpty() && ok == expect ? 0 : 1;
  }

  private static String header(ConsumerRecord<String, ?> r, String name) {
    Header h = r.headers().lastHeader(name);
    return h == null ? null : new String(h.value(), StandardCharsets.UTF_8);
  }

  private static void check(ConsumerRecord<String, CloudEvent> r, CloudEvent ce, PublicKey key)
      throws Exception {
    if (!"application/json".equals(header(r, "content-type"))) {
      throw new Exception("content-type " + header(r, "content-type") + ": not binary mode JSON");
    }
    if (!"1.0".equals(ce.getSpecVersion().toString()) || ce.getId().isEmpty()
        || ce.getType().isEmpty() || ce.getSource() == null || ce.getTime() == null) {
      throw new Exception("missing required attribute");
    }
    if (ce.getSubject() == null || !ce.getSubject().equals(r.key())) {
      throw new Exception("key " + r.key() + " is not the subject " + ce.getSubject());
    }
    Object corr = ce.getExtension("correlationid");
    Object version = ce.getExtension("dataschemaversion");
    if (corr == null || version == null || !version.toString().matches("[1-9][0-9]*")) {
      throw new Exception("missing correlationid or dataschemaversion extension");
    }
    if (!ce.getType().equals("order.created") && ce.getExtension("causationid") == null) {
      throw new Exception(ce.getType() + " without causationid");
    }
    JsonNode data = JSON.readTree(ce.getData().toBytes());
    if (!ce.getSubject().equals(data.path("order_id").asText())) {
      throw new Exception("data is not the event's JSON payload");
    }
    String tp = header(r, "traceparent");
    if (tp == null || !TRACEPARENT.matcher(tp).matches()) {
      throw new Exception("traceparent " + tp);
    }
    if (key != null) {
      verify(r, ce, key);
    }
  }

  private static void field(ByteArrayOutputStream out, byte[] b) {
    long n = b.length;
    while (n >= 0x80) {
      out.write((int) (n & 0x7f) | 0x80);
      n >>>= 7;
    }
    out.write((int) n);
    out.writeBytes(b);
  }

  /** Checks choreo_signature ("ed25519 KEYID SIG") over the record, as event/sign.go signs. */
  private static void verify(ConsumerRecord<String, CloudEvent> r, CloudEvent ce, PublicKey key)
      throws Exception {
    String[] sig = String.valueOf(header(r, "choreo_signature")).split(" ");
    if (sig.length != 3 || !sig[0].equals("ed25519")) {
      throw new Exception("choreo_signature is not \"ed25519 <key id> <signature>\"");
    }
    ByteArrayOutputStream in = new ByteArrayOutputStream();
    in.writeBytes("choreo-signature-v1".getBytes(StandardCharsets.UTF_8));
    field(in, r.topic().getBytes(StandardCharsets.UTF_8));
    field(in, r.key().getBytes(StandardCharsets.UTF_8));
    // CloudEventDeserializer consumed the value; the payload is the event's data.
    field(in, ce.getData().toBytes());
    for (String name : SIGNED) {
      Header h = r.headers().lastHeader(name);
      if (h == null) {
        in.write(0);
      } else {
        in.write(1);
        field(in, h.value());
      }
    }
    Signature s = Signature.getInstance("Ed25519");
    s.initVerify(key);
    s.update(in.toByteArray());
    if (!s.verify(Base64.getUrlDecoder().decode(sig[2]))) {
      throw new Exception("signature does not verify");
    }
  }

  private static KafkaProducer<String, CloudEvent> producer(String brokers, Encoding encoding) {
    Properties p = new Properties();
    p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, brokers);
    p.put(ProducerConfig.ACKS_CONFIG, "all");
    p.put(CloudEventSerializer.ENCODING_CONFIG, encoding.name());
    p.put(CloudEventSerializer.EVENT_FORMAT_CONFIG, JsonFormat.CONTENT_TYPE);
    return new KafkaProducer<>(p, new StringSerializer(), new CloudEventSerializer());
  }

  private static int write(String brokers, String topic, int n, String replyTopic)
      throws Exception {
    // order id -> the event written for it
    Map<String, CloudEvent> sent = new HashMap<>();
    Map<String, String> mode = new HashMap<>();
    String run = UUID.randomUUID().toString().substring(0, 8);
    for (Encoding encoding : new Encoding[] {Encoding.BINARY, Encoding.STRUCTURED}) {
      try (KafkaProducer<String, CloudEvent> p = producer(brokers, encoding)) {
        for (int i = 0; i < n; i++) {
          String order = "java-" + run + "-" + encoding.name().toLowerCase() + "-" + i;
          String id = UUID.randomUUID().toString();
          CloudEvent ce = CloudEventBuilder.v1()
              .withId(id)
              .withType("order.confirmed")
              .withSource(URI.create("order"))
              .withSubject(order)
              .withTime(OffsetDateTime.now(ZoneOffset.UTC))
              .withDataContentType("application/json")
              .withData(JSON.writeValueAsBytes(Map.of("order_id", order)))
              .withExtension("correlationid", "saga-" + id)
              .withExtension("dataschemaversion", 1)
              .build();
          p.send(new ProducerRecord<>(topic, order, ce)).get();
          sent.put(order, ce);
          mode.put(order, encoding.name().toLowerCase());
        }
      }
    }
    Map<String, Integer> answered = new TreeMap<>();
    List<String> bad = new ArrayList<>();
    long deadline = System.nanoTime() + TIMEOUT.toNanos();
    try (KafkaConsumer<String, CloudEvent> c = consumer(brokers, replyTopic)) {
      while (!sent.isEmpty() && System.nanoTime() < deadline) {
        for (ConsumerRecord<String, CloudEvent> r : c.poll(Duration.ofMillis(500))) {
          CloudEvent reply = r.value();
          CloudEvent cause = sent.get(reply.getSubject());
          if (cause == null || !reply.getType().equals("shipment.scheduled")) {
            continue; // another run's event
          }
          if (!cause.getId().equals(String.valueOf(reply.getExtension("causationid")))
              || !cause.getExtension("correlationid").equals(reply.getExtension("correlationid"))) {
            bad.add(reply.getSubject() + ": shipment.scheduled not caused by the Java event");
          }
          answered.merge(mode.get(reply.getSubject()), 1, Integer::sum);
          sent.remove(reply.getSubject());
        }
      }
    }
    System.out.printf(
        "java kafka-clients + cloudevents-kafka: wrote %d order.confirmed to %s (%d binary, %d"
            + " structured); shipment.scheduled on %s for %s, missing %d%n",
        2 * n, topic, n, n, replyTopic, answered, sent.size());
    bad.stream().limit(10).forEach(b -> System.out.println("  invalid: " + b));
    return sent.isEmpty() && bad.isEmpty() ? 0 : 1;
  }
}
