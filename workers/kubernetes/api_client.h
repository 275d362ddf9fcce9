// ApiClient: the Kubernetes backend's one seam onto the API server.
//
// Contract
// - request() sends one HTTP request (a path under the server, with its
//   query, e.g. "/api/v1/namespaces/ns/pods") and returns the status and the
//   whole body; any HTTP status is a reply, not an error. An error means no
//   reply came (connection refused, TLS refused, timeout) and says why.
// - stream() GETs a streaming resource (a watch, a followed log) and hands
//   each piece of body to `on_chunk` as it arrives; on_chunk is also called
//   with an empty piece at least every 250 ms while nothing arrives, so the
//   caller can end the stream early by returning false. It returns ok when
//   the server ended the body or on_chunk returned false; an error for no
//   reply, or a non-2xx status (the message carries the status and body).
// - The real client speaks HTTPS with Boost.Beast + Asio's OpenSSL stream,
//   verifies the server against the cluster's CA, and authenticates with a
//   bearer token or a client certificate (ClusterConnection). No C++
//   Kubernetes client is packaged in Debian; the REST API is small enough.
// - Implementations are thread-safe: the backend's watch, log and launch
//   threads call at once. Unit tests use a fake that records every request
//   and asserts the exact manifests.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "api/status.h"

namespace muster::workers::kubernetes {

struct HttpReply {
  int status = 0;
  std::string body;
};

class ApiClient {
 public:
  virtual ~ApiClient() = default;
  // `content_type` for a body: application/json, or
  // application/merge-patch+json for PATCH.
  virtual api::Result<HttpReply> request(const std::string& method, const std::string& path,
                                         const std::string& body = "",
                                         const std::string& content_type = "application/json") = 0;
  virtual api::Status stream(const std::string& path, const std::function<bool(std::string_view chunk)>& on_chunk) = 0;
};

// Where the API server is and how to trust and authenticate to it.
struct ClusterConnection {
  std::string host;  // name or address (the certificate is checked against it)
  int port = 443;
  std::string ca_pem;           // the cluster's CA (PEM); "" = the system's CAs
  std::string token;            // bearer token; "" when a client certificate is used
  std::string client_cert_pem;  // with client_key_pem: mutual TLS (kubeconfigs of admins)
  std::string client_key_pem;
  int timeout_ms = 30000;  // per request (streams: to connect and get the headers)
};

// invalid_argument when the CA or the client certificate cannot be read.
api::Result<std::unique_ptr<ApiClient>> make_beast_api_client(ClusterConnection connection);

}  // namespace muster::workers::kubernetes
