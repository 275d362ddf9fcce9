// The HTTP server over TLS (service/http/connection.h): requests, keep-alive,
// the limits and streamed responses as over plain TCP; handshakes that never
// finish (silence, garbage, plain HTTP, half a ClientHello) end at
// read_timeout without holding the only I/O thread; and the certificate
// musterd makes for itself (service/tls_identity.h): kept, remade when it
// lacks a name, pinned and CA-verified by api/base/client_socket.h.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "api/base/client_socket.h"
#include "http_test_server.h"
#include "service/tls_identity.h"

namespace muster {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using base::ClientSocket;
using Clock = std::chrono::steady_clock;

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/muster-tls-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

service::TlsIdentity identity(const fs::path& state) {
  auto id = service::self_signed_tls_identity(state, {"127.0.0.1", "localhost"});
  EXPECT_TRUE(id.is_ok()) << id.status().message();
  return id.value();
}

service::HttpServerOptions tls_options(const service::TlsIdentity& id, int io_threads = 2) {
  auto o = testing::TestServer::defaults();
  o.tls = service::TlsServerFiles{id.cert_file.string(), id.key_file.string()};
  o.io_threads = io_threads;
  return o;
}

// One request on `s`, its whole answer (Content-Length) back; "" on failure.
std::string round_trip(ClientSocket& s, const std::string& request) {
  const auto deadline = Clock::now() + 5s;
  if (s.send_all(request.data(), request.size(), deadline) != ClientSocket::Io::kOk) return "";
  std::string in;
  char buf[8192];
  for (;;) {
    const auto head = in.find("\r\n\r\n");
    if (head != std::string::npos) {
      const auto cl = in.find("Content-Length: ");
      if (cl != std::string::npos && in.size() >= head + 4 + std::stoul(in.substr(cl + 16))) return in;
    }
    size_t n = 0;
    if (s.recv_some(buf, sizeof buf, &n, deadline) != ClientSocket::Io::kOk) return in;
    in.append(buf, n);
  }
}

std::string post_echo(const std::string& body, bool keep_alive = true) {
  return "POST /api/v1/echo HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer T0KEN\r\nContent-Type: application/json\r\n"
         "Content-Length: " + std::to_string(body.size()) + (keep_alive ? "" : "\r\nConnection: close") + "\r\n\r\n" +
         body;
}

// A raw TCP connection to the port (no TLS), for the hostile cases.
int raw_connect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

// Reads until EOF (or 5 s); the bytes read.
std::string read_to_close(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return out;
    out.append(buf, static_cast<size_t>(n));
  }
}

class HttpServerTlsTest : public ::testing::Test {
 protected:
  TempDir dir_;
  service::TlsIdentity id_ = identity(dir_.path);
  base::TlsVerify pin_{id_.fingerprint, ""};
};

TEST_F(HttpServerTlsTest, PinnedClientGetsAnswersOnAKeptConnection) {
  testing::TestServer server(tls_options(id_));
  EXPECT_EQ(server.server().url().rfind("https://", 0), 0u);
  auto s = ClientSocket::connect("127.0.0.1", server.port(), &pin_, Clock::now() + 5s);
  ASSERT_TRUE(s.is_open()) << s.error();
  for (int i = 0; i < 3; ++i) {
    const std::string answer = round_trip(s, post_echo("{\"n\":" + std::to_string(i) + "}"));
    EXPECT_EQ(answer.rfind("HTTP/1.1 200", 0), 0u) << answer;
    EXPECT_NE(answer.find("\"n\":" + std::to_string(i)), std::string::npos) << answer;
  }
  EXPECT_EQ(server.echoed.load(), 3);
}

TEST_F(HttpServerTlsTest, CaFileVerifiesTheSelfSignedCertificateAndItsAddress) {
  testing::TestServer server(tls_options(id_));
  base::TlsVerify ca{"", id_.cert_file.string()};
  auto s = ClientSocket::connect("127.0.0.1", server.port(), &ca, Clock::now() + 5s);
  ASSERT_TRUE(s.is_open()) << s.error();
  EXPECT_EQ(round_trip(s, post_echo("{}")).rfind("HTTP/1.1 200", 0), 0u);
  // Without a CA file or pin the system's CAs do not know it: refused.
  base::TlsVerify none;
  auto refused = ClientSocket::connect("127.0.0.1", server.port(), &none, Clock::now() + 5s);
  EXPECT_FALSE(refused.is_open());
  EXPECT_TRUE(refused.certificate_refused());
  EXPECT_NE(refused.error().find("not trusted"), std::string::npos) << refused.error();
}

TEST_F(HttpServerTlsTest, WrongFingerprintIsRefusedBeforeAnythingIsSent) {
  testing::TestServer server(tls_options(id_));
  base::TlsVerify wrong{std::string(64, 'a'), ""};
  auto s = ClientSocket::connect("127.0.0.1", server.port(), &wrong, Clock::now() + 5s);
  EXPECT_FALSE(s.is_open());
  EXPECT_TRUE(s.certificate_refused());
  EXPECT_NE(s.error().find("has SHA-256 fingerprint " + id_.fingerprint + ", not the pinned " + std::string(64, 'a')),
            std::string::npos)
      << s.error();
  EXPECT_EQ(server.echoed.load(), 0);
}

TEST_F(HttpServerTlsTest, LimitsHoldOverTls) {
  testing::TestServer server(tls_options(id_));
  auto s = ClientSocket::connect("127.0.0.1", server.port(), &pin_, Clock::now() + 5s);
  ASSERT_TRUE(s.is_open()) << s.error();
  const std::string big = "{\"x\":\"" + std::string(70 << 10, 'a') + "\"}";
  EXPECT_EQ(round_trip(s, post_echo(big)).rfind("HTTP/1.1 413", 0), 0u);
  auto h = ClientSocket::connect("127.0.0.1", server.port(), &pin_, Clock::now() + 5s);
  ASSERT_TRUE(h.is_open());
  const std::string huge_header = "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(8192, 'b') + "\r\n\r\n";
  EXPECT_EQ(round_trip(h, huge_header).rfind("HTTP/1.1 431", 0), 0u);
}

TEST_F(HttpServerTlsTest, StreamedResponseOverTls) {
  testing::TestServer server(tls_options(id_));
  auto s = ClientSocket::connect("127.0.0.1", server.port(), &pin_, Clock::now() + 5s);
  ASSERT_TRUE(s.is_open()) << s.error();
  const std::string req = "GET /api/v1/stream HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer T0KEN\r\n\r\n";
  ASSERT_EQ(s.send_all(req.data(), req.size(), Clock::now() + 5s), ClientSocket::Io::kOk);
  ASSERT_TRUE(server.wait_streams(1));
  server.stream(0)->write("second;");
  server.stream(0)->close();
  std::string in;
  char buf[4096];
  size_t n = 0;
  while (s.recv_some(buf, sizeof buf, &n, Clock::now() + 5s) == ClientSocket::Io::kOk) in.append(buf, n);
  EXPECT_NE(in.find("first;"), std::string::npos) << in;
  EXPECT_NE(in.find("second;"), std::string::npos) << in;
  EXPECT_NE(in.find("\r\n0\r\n\r\n"), std::string::npos) << in;
}

// With one I/O thread: clients that never finish a handshake are dropped at
// read_timeout (600 ms), and a real client is served meanwhile.
TEST_F(HttpServerTlsTest, HandshakesThatNeverFinishHoldNoThread) {
  testing::TestServer server(tls_options(id_, /*io_threads=*/1));
  std::vector<int> silent;
  for (int i = 0; i < 20; ++i) silent.push_back(raw_connect(server.port()));
  const int half = raw_connect(server.port());
  const unsigned char hello_start[] = {0x16, 0x03, 0x01, 0x02, 0x00, 0x01};  // a ClientHello's first bytes
  ASSERT_EQ(::send(half, hello_start, sizeof hello_start, 0), static_cast<ssize_t>(sizeof hello_start));
  const int garbage = raw_connect(server.port());
  const std::string noise(300, '\x07');
  ASSERT_EQ(::send(garbage, noise.data(), noise.size(), 0), static_cast<ssize_t>(noise.size()));
  const int plain = raw_connect(server.port());
  const std::string get = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_EQ(::send(plain, get.data(), get.size(), 0), static_cast<ssize_t>(get.size()));

  const auto t0 = Clock::now();
  auto s = ClientSocket::connect("127.0.0.1", server.port(), &pin_, Clock::now() + 5s);
  ASSERT_TRUE(s.is_open()) << s.error();
  EXPECT_EQ(round_trip(s, post_echo("{}")).rfind("HTTP/1.1 200", 0), 0u);
  EXPECT_LT(Clock::now() - t0, 500ms) << "served beside 23 stuck handshakes";

  // Garbage and plain HTTP fail the handshake at once: no HTTP answer in clear.
  EXPECT_EQ(read_to_close(garbage).find("HTTP/1.1"), std::string::npos);
  EXPECT_EQ(read_to_close(plain).find("HTTP/1.1"), std::string::npos);
  // Silence and half a ClientHello end at read_timeout.
  const auto t1 = Clock::now();
  read_to_close(half);
  for (int fd : silent) read_to_close(fd);
  EXPECT_LT(Clock::now() - t1, 3s);
  for (int fd : silent) ::close(fd);
  for (int fd : {half, garbage, plain}) ::close(fd);
  const auto deadline = Clock::now() + 3s;
  while (server.server().connection_count() > 1 && Clock::now() < deadline) std::this_thread::sleep_for(10ms);
  EXPECT_LE(server.server().connection_count(), 1u);
}

// After the handshake the plain limits hold: a request sent too slowly is
// cut at read_timeout (600 ms), an idle kept connection at idle_timeout.
TEST_F(HttpServerTlsTest, SlowAndIdleClientsAreDisconnectedOverTls) {
  auto o = tls_options(id_);
  o.idle_timeout = std::chrono::milliseconds(800);
  testing::TestServer server(o);
  auto slow = ClientSocket::connect("127.0.0.1", server.port(), &pin_, Clock::now() + 5s);
  ASSERT_TRUE(slow.is_open()) << slow.error();
  const std::string part = "POST /api/v1/echo HTTP/1.1\r\nHost: x\r\n";
  ASSERT_EQ(slow.send_all(part.data(), part.size(), Clock::now() + 5s), ClientSocket::Io::kOk);
  const auto t0 = Clock::now();
  char buf[512];
  size_t n = 0;
  EXPECT_EQ(slow.recv_some(buf, sizeof buf, &n, Clock::now() + 5s), ClientSocket::Io::kClosed);
  EXPECT_LT(Clock::now() - t0, 3s);

  auto idle = ClientSocket::connect("127.0.0.1", server.port(), &pin_, Clock::now() + 5s);
  ASSERT_TRUE(idle.is_open()) << idle.error();
  EXPECT_EQ(round_trip(idle, post_echo("{}")).rfind("HTTP/1.1 200", 0), 0u);
  const auto t1 = Clock::now();
  EXPECT_EQ(idle.recv_some(buf, sizeof buf, &n, Clock::now() + 5s), ClientSocket::Io::kClosed);
  EXPECT_GE(Clock::now() - t1, 500ms);
  EXPECT_LT(Clock::now() - t1, 3s);
}

TEST_F(HttpServerTlsTest, OverTheConnectionLimitClosesWithoutPlaintext) {
  auto o = tls_options(id_);
  o.max_connections = 1;
  testing::TestServer server(o);
  auto first = ClientSocket::connect("127.0.0.1", server.port(), &pin_, Clock::now() + 5s);
  ASSERT_TRUE(first.is_open()) << first.error();
  const int second = raw_connect(server.port());
  EXPECT_EQ(read_to_close(second), "");
  ::close(second);
}

TEST(TlsIdentity, KeptAcrossStartsAndRemadeForANewName) {
  TempDir dir;
  const auto a = identity(dir.path);
  ASSERT_EQ(a.fingerprint.size(), 64u);
  EXPECT_EQ(fs::status(a.key_file).permissions() & fs::perms::all, fs::perms::owner_read | fs::perms::owner_write);
  const auto b = identity(dir.path);
  EXPECT_EQ(a.fingerprint, b.fingerprint) << "kept: pinned clients keep working";
  auto c = service::self_signed_tls_identity(dir.path, {"127.0.0.1", "localhost", "10.200.0.1"});
  ASSERT_TRUE(c.is_ok());
  EXPECT_NE(c->fingerprint, a.fingerprint) << "a certificate lacking 10.200.0.1 is made again";
  // The fingerprint is OpenSSL's SHA-256 of the DER certificate.
  const std::string cmd = "openssl x509 -in " + c->cert_file.string() + " -noout -fingerprint -sha256 -ext subjectAltName";
  FILE* p = ::popen(cmd.c_str(), "r");
  std::string out(4096, '\0');
  out.resize(std::fread(out.data(), 1, out.size(), p));
  ::pclose(p);
  std::string hex;
  for (char ch : out.substr(out.find('=') + 1, 95)) {
    if (ch != ':') hex += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  }
  EXPECT_EQ(hex, c->fingerprint) << out;
  EXPECT_NE(out.find("IP Address:10.200.0.1"), std::string::npos) << out;
}

TEST(TlsIdentity, GivenCertificateAndKeyMustMatch) {
  TempDir one, two;
  const auto a = identity(one.path);
  const auto b = identity(two.path);
  auto given = service::given_tls_identity(a.cert_file, a.key_file);
  ASSERT_TRUE(given.is_ok()) << given.status().message();
  EXPECT_EQ(given->fingerprint, a.fingerprint);
  EXPECT_FALSE(service::given_tls_identity(a.cert_file, "").is_ok());
  service::HttpServerOptions o;
  o.port = 0;
  o.tls = service::TlsServerFiles{a.cert_file.string(), b.key_file.string()};
  service::Router router;
  service::Authenticator auth("T", [](const std::string&) { return std::optional<std::string>(); });
  service::HttpServer server(o, router, auth);
  const auto s = server.listen();
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("does not match"), std::string::npos) << s.message();
}

TEST(ClientSocketTls, FingerprintsAndUrls) {
  EXPECT_EQ(base::parse_fingerprint(std::string(64, 'A')), std::string(64, 'a'));
  std::string colons;
  for (int i = 0; i < 32; ++i) colons += std::string(i ? ":" : "") + "0F";
  EXPECT_EQ(base::parse_fingerprint(colons), [] {
    std::string s;
    for (int i = 0; i < 32; ++i) s += "0f";
    return s;
  }());
  EXPECT_FALSE(base::parse_fingerprint("abc"));
  EXPECT_FALSE(base::parse_fingerprint(std::string(63, 'a') + "g"));
  base::TlsVerify v;
  EXPECT_NE(base::tls_verify_from_env({{base::kEnvTlsFingerprint, "nope"}}, &v).find("MUSTER_TLS_FINGERPRINT"),
            std::string::npos);
  const auto u = base::parse_url("https://10.0.0.1:7878/x");
  ASSERT_TRUE(u);
  EXPECT_TRUE(u->tls);
  EXPECT_EQ(u->host, "10.0.0.1");
  EXPECT_EQ(u->port, 7878);
  EXPECT_EQ(u->path, "/x");
  EXPECT_FALSE(base::parse_url("ftp://x:1"));
}

}  // namespace
}  // namespace muster
