// server/server_client_test.cc: the real `spill serve` on a loopback port,
// driven by the official `openai` npm package under node
// (server/openai_client_test.js) and by raw sockets for what a client
// library hides (status codes, body cap, disconnects, /metrics).
//
// Needs node and the openai package that ./lab installs into cache/npm-openai
// (SPILL_OPENAI_DIR, or found beside this source file's real path). Without
// node the client tests are skipped with the reason; without the package
// they fail (run ./lab test or ./lab deps). Every server is started with
// --port 0 and stopped with SIGTERM (exit 0 required) before the test ends.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include <chrono>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char **environ;

namespace {

std::string runfile(const std::string &rel) {
  const char *srcdir = getenv("TEST_SRCDIR");
  const char *ws = getenv("TEST_WORKSPACE");
  return std::string(srcdir ? srcdir : ".") + "/" + (ws ? ws : "spill") + "/" + rel;
}

std::string tmpdir() {
  const char *t = getenv("TEST_TMPDIR");
  return t ? t : "/tmp";
}

std::string slurp(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

bool exists(const std::string &p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0;
}

std::string find_node() {
  for (const char *p : {"/usr/bin/node", "/usr/local/bin/node", "/usr/bin/nodejs"})
    if (access(p, X_OK) == 0) return p;
  return "";
}

// The openai package: $SPILL_OPENAI_DIR, else cache/npm-openai of the source tree
// this test file lives in (its runfile is a symlink into that tree).
std::string find_openai() {
  const char *env = getenv("SPILL_OPENAI_DIR");
  if (env && *env) return env;
  char real[PATH_MAX];
  if (!realpath(runfile("server/openai_client_test.js").c_str(), real)) return "";
  std::string root = real;
  for (int i = 0; i < 2; i++) root = root.substr(0, root.rfind('/'));
  return root + "/cache/npm-openai/node_modules/openai";
}

// Runs argv; stdout to out_file (if not empty), stderr to err_file (if not
// empty). Returns the exit status (-1 if it did not exit normally).
int run(const std::vector<std::string> &argv, const std::string &out_file = "",
        const std::string &err_file = "", const std::vector<std::string> &env_add = {}) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (!out_file.empty())
    posix_spawn_file_actions_addopen(&fa, 1, out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (!err_file.empty())
    posix_spawn_file_actions_addopen(&fa, 2, err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<char *> av, ev;
  for (auto &a : argv) av.push_back(const_cast<char *>(a.c_str()));
  av.push_back(nullptr);
  for (char **e = environ; *e; e++) ev.push_back(*e);
  for (auto &e : env_add) ev.push_back(const_cast<char *>(e.c_str()));
  ev.push_back(nullptr);
  pid_t pid;
  int rc = posix_spawn(&pid, av[0], &fa, nullptr, av.data(), ev.data());
  posix_spawn_file_actions_destroy(&fa);
  if (rc) return -1;
  int st;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

struct Http {
  int status = 0;
  std::string headers, body;
};

int connect_to(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (sockaddr *)&a, sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

void send_all(int fd, const std::string &s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return;
    off += (size_t)n;
  }
}

std::string request_text(const std::string &method, const std::string &path,
                         const std::string &body, const std::string &extra) {
  std::string r = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" + extra;
  if (method == "POST")
    r += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  return r + "\r\n" + body;
}

// One request on its own connection (Connection: close); the body is
// de-chunked.
Http http(int port, const std::string &method, const std::string &path,
          const std::string &body = "", const std::string &extra = "") {
  Http h;
  int fd = connect_to(port);
  if (fd < 0) return h;
  send_all(fd, request_text(method, path, body, extra));
  std::string all;
  char buf[65536];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 30000) <= 0) break;
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    all.append(buf, (size_t)n);
  }
  close(fd);
  size_t he = all.find("\r\n\r\n");
  if (he == std::string::npos) return h;
  h.headers = all.substr(0, he);
  sscanf(h.headers.c_str(), "HTTP/1.%*d %d", &h.status);
  std::string raw = all.substr(he + 4);
  if (h.headers.find("chunked") != std::string::npos) {
    size_t i = 0;
    while (i < raw.size()) {
      size_t le = raw.find("\r\n", i);
      if (le == std::string::npos) break;
      size_t n = strtoul(raw.substr(i, le - i).c_str(), nullptr, 16);
      if (n == 0) break;
      h.body += raw.substr(le + 2, n);
      i = le + 2 + n + 2;
    }
  } else {
    h.body = raw;
  }
  return h;
}

// A metric's value from Prometheus text ("name value" or "name{labels} value").
double metric(const std::string &text, const std::string &name) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, name.size(), name) == 0 && line.size() > name.size() &&
        line[name.size()] == ' ')
      return strtod(line.c_str() + name.size() + 1, nullptr);
  }
  return -1;
}

long long json_int(const std::string &json, const std::string &key) {
  std::smatch m;
  std::regex re("\"" + key + "\": ?(-?[0-9]+)");
  if (!std::regex_search(json, m, re)) return -1;
  return std::stoll(m[1]);
}

uint64_t rss_of(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return strtoull(line.c_str() + 6, nullptr, 10) * 1024;
  return 0;
}

class Server {
 public:
  Server(const std::string &spill, const std::string &model, std::vector<std::string> args) {
    static int n = 0;
    log_ = tmpdir() + "/serve-" + std::to_string(getpid()) + "-" + std::to_string(++n) + ".log";
    std::vector<std::string> argv = {spill, "serve", model, "--port", "0"};
    argv.insert(argv.end(), args.begin(), args.end());
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 2, log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    std::vector<char *> av;
    for (auto &a : argv) av.push_back(const_cast<char *>(a.c_str()));
    av.push_back(nullptr);
    if (posix_spawn(&pid_, av[0], &fa, nullptr, av.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&fa);
    std::regex re("listening on http://127\\.0\\.0\\.1:([0-9]+)");
    for (int i = 0; i < 600 && pid_ > 0 && port_ == 0; i++) {  // up to 60 s (sanitizers)
      std::smatch m;
      std::string log = slurp(log_);
      if (std::regex_search(log, m, re)) port_ = std::stoi(m[1]);
      else std::this_thread::sleep_for(std::chrono::milliseconds(100));
      int st;
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        break;
      }
    }
  }
  ~Server() { stop(); }
  // SIGTERM, then the exit status (0 = clean shutdown); SIGKILL after 20 s.
  int stop() {
    if (pid_ <= 0) return exit_;
    kill(pid_, SIGTERM);
    int st = 0;
    for (int i = 0; i < 200; i++) {
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        exit_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        return exit_;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, &st, 0);
    pid_ = -1;
    return exit_ = 137;
  }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::string log() const { return slurp(log_); }

 private:
  pid_t pid_ = -1;
  int port_ = 0, exit_ = -1;
  std::string log_;
};

class ServerClientTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    spill_ = runfile("cli/spill");
    model_ = tmpdir() + "/nano";
    if (!exists(model_ + "/manifest.json")) {
      ASSERT_EQ(run({spill_, "gen", "--preset", "nano", model_}, "/dev/null", "/dev/null"), 0);
    }
    std::string info = tmpdir() + "/info.json";
    ASSERT_EQ(run({spill_, "info", "--json", model_}, info, "/dev/null"), 0);
    std::smatch m;
    std::string t = slurp(info);
    ASSERT_TRUE(std::regex_search(t, m, std::regex("\"name\": ?\"([^\"]+)\"")));
    model_id_ = m[1];
  }

  // Skips without node; fails without the openai package.
  bool need_client() {
    node_ = find_node();
    if (node_.empty()) {
      printf("SKIPPED: node is not installed (./lab installs nodejs)\n");
      return false;
    }
    openai_ = find_openai();
    EXPECT_TRUE(exists(openai_ + "/package.json"))
        << "the openai npm package is not at " << openai_
        << " (./lab test installs it; or set SPILL_OPENAI_DIR)";
    return exists(openai_ + "/package.json");
  }

  // Runs a client phase; returns the RESULT json ("" on failure, with the
  // output attached to the test failure).
  std::string client(const Server &s, std::vector<std::string> args,
                     const std::vector<std::string> &env = {}) {
    std::string out = tmpdir() + "/client.out";
    std::vector<std::string> argv = {node_, runfile("server/openai_client_test.js")};
    argv.push_back(args[0]);
    argv.push_back(s.url());
    argv.insert(argv.end(), args.begin() + 1, args.end());
    std::vector<std::string> e = env;
    e.push_back("SPILL_OPENAI_DIR=" + openai_);
    int rc = run(argv, out, out, e);
    std::string text = slurp(out);
    EXPECT_EQ(rc, 0) << text << "\nserver log:\n" << s.log();
    size_t r = text.rfind("RESULT ");
    if (rc || r == std::string::npos) return "";
    printf("%s", text.c_str());
    return text.substr(r + 7);
  }

  static std::string spill_, model_, model_id_;
  std::string node_, openai_;
};
std::string ServerClientTest::spill_, ServerClientTest::model_, ServerClientTest::model_id_;

TEST_F(ServerClientTest, OpenAIClientChatCompletionsModelsAndErrors) {
  if (!need_client()) GTEST_SKIP() << "node is not installed";
  std::string traces = tmpdir() + "/traces";
  Server s(spill_, model_, {"--ctx", "256", "--trace-dir", traces});
  ASSERT_GT(s.port(), 0) << s.log();
  std::string r = client(s, {"basic", model_id_});
  ASSERT_FALSE(r.empty());
  // every generation left its router trace and per-token profile
  std::regex id_re("((?:chat)?cmpl-[0-9a-f]+-[0-9]+) (chat|completion) ([0-9]+) prompt \\+ ([0-9]+) generated");
  std::string log = s.log();
  int n = 0;
  for (std::sregex_iterator it(log.begin(), log.end(), id_re), end; it != end; ++it, ++n) {
    std::string id = (*it)[1];
    std::string prof = slurp(traces + "/" + id + ".profile.jsonl");
    std::string trace = slurp(traces + "/" + id + ".trace.jsonl");
    int gen = std::stoi((*it)[4]);
    EXPECT_FALSE(trace.empty()) << id;
    // one profile row per decode token (plus the prefill chunks)
    EXPECT_GE((int)std::count(prof.begin(), prof.end(), '\n'), gen) << id;
  }
  EXPECT_GE(n, 5);
  EXPECT_EQ(s.stop(), 0);
}

TEST_F(ServerClientTest, StreamedTextEqualsSpillRun) {
  if (!need_client()) GTEST_SKIP() << "node is not installed";
  Server s(spill_, model_, {"--ctx", "512"});
  ASSERT_GT(s.port(), 0) << s.log();
  struct Case {
    const char *kind, *prompt, *temp, *top_k, *top_p, *seed;
  } cases[] = {
      {"completion", "The quick brown fox", "0", "0", "1", "1"},
      {"completion", "Once upon a time", "0.8", "40", "0.9", "11"},
      {"chat", "Hello there", "0.7", "0", "0.95", "3"},
  };
  for (const Case &c : cases) {
    // chat goes through the documented fallback rendering (docs/SERVER.md)
    std::string prompt = std::string(c.kind) == "chat"
                             ? std::string("<|user|>\n") + c.prompt + "\n<|assistant|>\n"
                             : c.prompt;
    std::string out = tmpdir() + "/run.out";
    ASSERT_EQ(run({spill_, "run", model_, prompt, "-n", "48", "--ctx", "512", "--temp", c.temp,
                   "--top-k", c.top_k, "--top-p", c.top_p, "--sample-seed", c.seed},
                  out, "/dev/null"),
              0);
    std::string r = client(s, {"same", c.kind, out, c.prompt, "48", c.temp, c.top_k, c.top_p, c.seed});
    EXPECT_FALSE(r.empty()) << c.kind << " " << c.prompt;
  }
  EXPECT_EQ(s.stop(), 0);
}

TEST_F(ServerClientTest, MetricsEqualTheRunSummaryCounters) {
  Server s(spill_, model_, {});
  ASSERT_GT(s.port(), 0) << s.log();
  const std::string prompt = "The quick brown fox";
  Http h = http(s.port(), "POST", "/v1/completions",
                "{\"model\":\"" + model_id_ + "\",\"prompt\":\"" + prompt +
                    "\",\"max_tokens\":16,\"temperature\":0}");
  ASSERT_EQ(h.status, 200) << h.body;
  Http m = http(s.port(), "GET", "/metrics");
  ASSERT_EQ(m.status, 200);
  EXPECT_NE(m.headers.find("text/plain; version=0.0.4"), std::string::npos);
  // the same workload through `spill bench --json` (cold cache, greedy)
  std::string out = tmpdir() + "/bench.json";
  ASSERT_EQ(run({spill_, "bench", "--json", "--prompt", prompt, "-n", "16", model_}, out, "/dev/null"), 0);
  std::string b = slurp(out);
  EXPECT_EQ(metric(m.body, "spill_expert_cache_hits_total"), json_int(b, "hits")) << b;
  EXPECT_EQ(metric(m.body, "spill_expert_cache_misses_total"), json_int(b, "misses"));
  EXPECT_EQ(metric(m.body, "spill_expert_cache_decode_hits_total"), json_int(b, "decode_hits"));
  EXPECT_EQ(metric(m.body, "spill_expert_cache_decode_misses_total"), json_int(b, "decode_misses"));
  EXPECT_EQ(metric(m.body, "spill_expert_reads_total"), json_int(b, "reads"));
  EXPECT_EQ(metric(m.body, "spill_expert_bytes_read_total"), json_int(b, "bytes_read"));
  EXPECT_EQ(metric(m.body, "spill_generated_tokens_total"), json_int(b, "tokens"));
  EXPECT_EQ(metric(m.body, "spill_prompt_tokens_total"), json_int(b, "prompt_tokens"));
  EXPECT_EQ(metric(m.body, "spill_budget_bytes"), json_int(b, "budget"));
  EXPECT_EQ(metric(m.body, "spill_expert_cache_slots"), json_int(b, "cache_slots"));
  EXPECT_EQ(metric(m.body, "spill_time_to_first_token_seconds_count"), 1);
  EXPECT_EQ(metric(m.body, "spill_inter_token_latency_seconds_count"), 15);
  EXPECT_GT(metric(m.body, "spill_resident_set_bytes"), 0);
  EXPECT_EQ(metric(m.body, "spill_http_requests_total{endpoint=\"/v1/completions\",code=\"200\"}"), 1);
  EXPECT_EQ(s.stop(), 0);
}

// A completion's text (JSON-escaped, as served).
std::string completion_text(const std::string &body) {
  std::smatch m;
  if (!std::regex_search(body, m, std::regex("\"text\": ?\"((?:[^\"\\\\]|\\\\.)*)\""))) return "<none>";
  return m[1];
}

Http complete(const Server &s, const std::string &model_id, const std::string &prompt, int n,
              const std::string &sampling = "\"temperature\":0") {
  return http(s.port(), "POST", "/v1/completions",
              "{\"model\":\"" + model_id + "\",\"prompt\":\"" + prompt + "\",\"max_tokens\":" +
                  std::to_string(n) + "," + sampling + "}");
}

// Issue 31 item 2: the next turn of the conversation the engine holds
// prefills only its new tokens, reported as usage.prompt_tokens_details.
// cached_tokens and in /metrics; --session-dir keeps it across a restart;
// the replies (greedy and sampled) equal a server that prefills every
// prompt whole (--no-prefix-reuse). The nano model mixes KDA and MLA
// layers: its recurrent state is kept only for a true extension, so the
// conversation is steered through a greedy first token that is a printable
// byte (the byte tokenizer reads it back as the same token).
TEST_F(ServerClientTest, PrefixReuseAndSessionDirGiveTheRepliesOfAFullPrefill) {
  Server f(spill_, model_, {"--ctx", "256", "--no-prefix-reuse"});
  ASSERT_GT(f.port(), 0) << f.log();
  std::string a, c;
  for (const char *cand : {"The", "Hello", "Once", "In", "Why", "It", "We", "A", "On", "My",
                           "Zebra", "Tell", "So", "If", "42", "Rain", "Code", "Map", "Sun", "Go"}) {
    Http h = complete(f, model_id_, cand, 1);
    ASSERT_EQ(h.status, 200) << h.body;
    const std::string t = completion_text(h.body);
    if (t.size() == 1 && t[0] > ' ' && t[0] <= '~' && t[0] != '"' && t[0] != '\\') {
      a = cand;
      c = t;
      break;
    }
  }
  ASSERT_FALSE(a.empty()) << "no candidate prompt's greedy token is a printable byte";
  const std::string dir = tmpdir() + "/sessions-" + std::to_string(getpid());
  {
    Server r1(spill_, model_, {"--ctx", "256", "--session-dir", dir});
    ASSERT_GT(r1.port(), 0) << r1.log();
    Http h = complete(r1, model_id_, a, 1);
    ASSERT_EQ(h.status, 200) << h.body;
    EXPECT_EQ(completion_text(h.body), c);
    EXPECT_EQ(json_int(h.body, "cached_tokens"), 0) << h.body;
    EXPECT_EQ(r1.stop(), 0);
  }
  ASSERT_TRUE(exists(dir + "/conversation.session"));
  Server r2(spill_, model_, {"--ctx", "256", "--session-dir", dir});
  ASSERT_GT(r2.port(), 0) << r2.log();
  EXPECT_NE(r2.log().find("tokens loaded"), std::string::npos) << r2.log();
  // the next turn: BOS, a, c held; " and more" is new. Sampled: the reply
  // draws from the request's seed whatever was kept
  const std::string p2 = a + c + " and more";
  const std::string sampled = "\"temperature\":0.8,\"top_k\":40,\"seed\":9";
  Http h2 = complete(r2, model_id_, p2, 12, sampled);
  Http f2 = complete(f, model_id_, p2, 12, sampled);
  ASSERT_EQ(h2.status, 200) << h2.body;
  ASSERT_EQ(f2.status, 200) << f2.body;
  EXPECT_EQ(completion_text(h2.body), completion_text(f2.body));
  EXPECT_EQ(json_int(h2.body, "completion_tokens"), json_int(f2.body, "completion_tokens"));
  const long long cached = 1 + (long long)a.size() + 1;
  EXPECT_EQ(json_int(h2.body, "cached_tokens"), cached) << h2.body;
  EXPECT_EQ(json_int(f2.body, "cached_tokens"), 0) << f2.body;
  const long long prompt = json_int(h2.body, "prompt_tokens");
  EXPECT_EQ(prompt, cached + 9);
  // a prompt that leaves the conversation: a recurrent state starts over
  Http h3 = complete(r2, model_id_, "Something else", 8);
  Http f3 = complete(f, model_id_, "Something else", 8);
  EXPECT_EQ(completion_text(h3.body), completion_text(f3.body));
  EXPECT_EQ(json_int(h3.body, "cached_tokens"), 0) << h3.body;
  Http m = http(r2.port(), "GET", "/metrics");
  EXPECT_EQ(metric(m.body, "spill_prompt_tokens_cached_total"), cached) << m.body;
  EXPECT_EQ(metric(m.body, "spill_prompt_tokens_total"), (prompt - cached) + 15) << m.body;
  EXPECT_EQ(r2.stop(), 0);
  // the saved conversation is this model's at ctx 256: another ctx refuses it
  Server r3(spill_, model_, {"--ctx", "128", "--session-dir", dir});
  EXPECT_EQ(r3.port(), 0);
  EXPECT_NE(r3.log().find("SPILL_E_SESSION"), std::string::npos) << r3.log();
  EXPECT_NE(r3.log().find("saved at ctx 256, this engine runs ctx 128"), std::string::npos);
  EXPECT_EQ(f.stop(), 0);
}

// spill serve --draft 4: greedy replies equal a server without drafts (the
// n-gram drafts of this repeating prompt are verified and rolled back
// losslessly), and /metrics counts drafted, accepted and decode forwards as
// `spill run --draft 4 --json` does for the same request; a server without
// drafts counts none.
TEST_F(ServerClientTest, DraftsServeTheRepliesOfNoDraftsAndAreCounted) {
  Server d(spill_, model_, {"--ctx", "256", "--draft", "4", "--no-prefix-reuse"});
  Server f(spill_, model_, {"--ctx", "256", "--no-prefix-reuse"});
  ASSERT_GT(d.port(), 0) << d.log();
  ASSERT_GT(f.port(), 0) << f.log();
  const std::string prompt = "abc abd abc abd abc abd abc ab";
  Http hd = complete(d, model_id_, prompt, 24), hf = complete(f, model_id_, prompt, 24);
  ASSERT_EQ(hd.status, 200) << hd.body;
  ASSERT_EQ(hf.status, 200) << hf.body;
  EXPECT_EQ(completion_text(hd.body), completion_text(hf.body));
  EXPECT_EQ(json_int(hd.body, "completion_tokens"), json_int(hf.body, "completion_tokens"));
  std::string out = tmpdir() + "/draft-run.json";
  ASSERT_EQ(run({spill_, "run", model_, prompt, "-n", "24", "--ctx", "256", "--draft", "4",
                 "--json"},
                "/dev/null", out),
            0);
  const std::string r = slurp(out);
  const long long drafted = json_int(r, "draft_tokens"), accepted = json_int(r, "draft_accepted");
  ASSERT_GT(drafted, 0) << r; // the prompt's n-grams give drafts
  Http md = http(d.port(), "GET", "/metrics"), mf = http(f.port(), "GET", "/metrics");
  EXPECT_EQ(metric(md.body, "spill_draft_tokens_total"), drafted) << md.body;
  EXPECT_EQ(metric(md.body, "spill_draft_accepted_total"), accepted) << md.body;
  EXPECT_EQ(metric(md.body, "spill_decode_forwards_total"), json_int(r, "decode_forwards"));
  // every generated token is a forward's own or an accepted draft (an EOS
  // is generated without a forward)
  const double gen = metric(md.body, "spill_generated_tokens_total");
  const double fa = metric(md.body, "spill_decode_forwards_total") + (double)accepted;
  EXPECT_TRUE(fa == gen || fa == gen - 1) << fa << " vs " << gen;
  EXPECT_EQ(metric(mf.body, "spill_draft_tokens_total"), 0) << mf.body;
  EXPECT_EQ(metric(mf.body, "spill_draft_accepted_total"), 0) << mf.body;
  EXPECT_EQ(d.stop(), 0);
  EXPECT_EQ(f.stop(), 0);
}

TEST_F(ServerClientTest, LoadEightClientsTwentyRequestsEachRssFlat) {
  if (!need_client()) GTEST_SKIP() << "node is not installed";
  Server s(spill_, model_, {"--max-queue", "16", "--quiet"});
  ASSERT_GT(s.port(), 0) << s.log();
  ASSERT_FALSE(client(s, {"load", "8", "3"}).empty());  // warm-up: allocator, threads, cache
  uint64_t rss0 = rss_of(s.pid());
  std::string r = client(s, {"load", "8", "20"});
  ASSERT_FALSE(r.empty());
  uint64_t rss1 = rss_of(s.pid());
  EXPECT_EQ(json_int(r, "done"), 160);
  EXPECT_EQ(json_int(r, "distinct"), 160);
  printf("server RSS %.2f MiB -> %.2f MiB over 168 requests\n", rss0 / 1048576.0, rss1 / 1048576.0);
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // ASan keeps freed blocks in its quarantine (up to 256 MiB) and TSan grows
  // its shadow memory, so RSS grows by design; leaks are caught by
  // LeakSanitizer at the server's exit (stop() must return 0).
  printf("RSS flatness not judged under a sanitizer (quarantine / shadow memory)\n");
#else
  EXPECT_LT(rss1, rss0 + (4u << 20)) << "server RSS grew by more than 4 MiB";
#endif
  Http m = http(s.port(), "GET", "/metrics");
  // warm-up 8 + 24, load 8 + 160: every request answered exactly once, none refused
  EXPECT_EQ(metric(m.body, "spill_http_requests_total{endpoint=\"/v1/completions\",code=\"200\"}"),
            8 + 24 + 8 + 160);
  EXPECT_EQ(metric(m.body, "spill_http_requests_total{endpoint=\"/v1/completions\",code=\"429\"}"), -1);
  EXPECT_EQ(metric(m.body, "spill_generations_total{finish=\"error\"}"), 0);
  EXPECT_EQ(metric(m.body, "spill_generations_total{finish=\"cancelled\"}"), 0);
  EXPECT_EQ(s.stop(), 0);
}

TEST_F(ServerClientTest, QueueLimitAnswers429WithAJsonError) {
  if (!need_client()) GTEST_SKIP() << "node is not installed";
  Server s(spill_, model_, {"--max-queue", "1", "--quiet"});
  ASSERT_GT(s.port(), 0) << s.log();
  std::string r = client(s, {"queue", "8"});
  ASSERT_FALSE(r.empty());
  Http m = http(s.port(), "GET", "/metrics");
  EXPECT_EQ(metric(m.body, "spill_http_requests_total{endpoint=\"/v1/completions\",code=\"429\"}"),
            json_int(r, "n429"));
  EXPECT_EQ(metric(m.body, "spill_http_requests_total{endpoint=\"/v1/completions\",code=\"200\"}"),
            json_int(r, "n200"));
  EXPECT_EQ(s.stop(), 0);
}

// The generation is made slow (4 cache slots, expert reads throttled to
// 1 MB/s: about 50 ms a token on nano, 3000 tokens would take minutes), so
// it cannot end by itself before the client goes away however loaded the
// machine is; the wait for the cancellation is a deadline (60 s), not a
// count of scrapes, so a slow scheduler cannot fail it either.
TEST_F(ServerClientTest, ClientDisconnectCancelsTheGeneration) {
  Server s(spill_, model_, {"--cache-slots", "4", "--io-throttle", "1M"});
  ASSERT_GT(s.port(), 0) << s.log();
  int fd = connect_to(s.port());
  ASSERT_GE(fd, 0);
  std::string body = "{\"model\":\"" + model_id_ +
                     "\",\"prompt\":\"tell me everything\",\"max_tokens\":3000,\"temperature\":0,"
                     "\"stream\":true}";
  send_all(fd, request_text("POST", "/v1/completions", body, ""));
  std::string got;
  char buf[4096];
  while (got.find("\"text\"") == std::string::npos) {  // the first token's event
    pollfd p{fd, POLLIN, 0};
    ASSERT_GT(poll(&p, 1, 30000), 0);
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    ASSERT_GT(n, 0);
    got.append(buf, (size_t)n);
  }
  close(fd);
  auto t_close = std::chrono::steady_clock::now();
  double cancelled = 0, finished = 0, gen = 0;
  while (cancelled < 1 && finished < 1 &&
         std::chrono::steady_clock::now() - t_close < std::chrono::seconds(60)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    Http m = http(s.port(), "GET", "/metrics");
    cancelled = metric(m.body, "spill_generations_total{finish=\"cancelled\"}");
    finished = metric(m.body, "spill_generations_total{finish=\"length\"}") +
               metric(m.body, "spill_generations_total{finish=\"stop\"}");
    gen = metric(m.body, "spill_generated_tokens_total");
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_close).count();
  EXPECT_EQ(cancelled, 1) << "no cancellation within 60 s of the disconnect\n" << s.log();
  EXPECT_LT(finished, 1) << "the generation ended by itself, not by the disconnect\n" << s.log();
  printf("generation cancelled after %.0f of 3000 tokens, seen %.2f s after the close\n", gen, secs);
  EXPECT_LT(gen, 3000);
  EXPECT_GE(gen, 1);
  EXPECT_EQ(s.stop(), 0);
}

TEST_F(ServerClientTest, ApiKeyBodyCapAndErrorObjects) {
  Server s(spill_, model_, {"--api-key", "s3cret"});
  ASSERT_GT(s.port(), 0) << s.log();
  const std::string key = "Authorization: Bearer s3cret\r\n";
  EXPECT_EQ(http(s.port(), "GET", "/health").status, 200);
  Http h = http(s.port(), "GET", "/v1/models");
  EXPECT_EQ(h.status, 401);
  EXPECT_NE(h.body.find("\"invalid_api_key\""), std::string::npos) << h.body;
  EXPECT_EQ(http(s.port(), "GET", "/v1/models", "", "Authorization: Bearer s3cres\r\n").status, 401);
  EXPECT_EQ(http(s.port(), "GET", "/v1/models", "", "Authorization: Bearer s3cret2\r\n").status, 401);
  EXPECT_EQ(http(s.port(), "GET", "/metrics").status, 401);
  EXPECT_EQ(http(s.port(), "GET", "/v1/models", "", key).status, 200);
  // 1 MiB + 1 byte
  std::string big = "{\"model\":\"" + model_id_ + "\",\"prompt\":\"" + std::string(1 << 20, 'a') + "\"}";
  h = http(s.port(), "POST", "/v1/completions", big, key);
  EXPECT_EQ(h.status, 413);
  EXPECT_NE(h.body.find("\"body_too_large\""), std::string::npos) << h.body;
  h = http(s.port(), "POST", "/v1/completions", "{\"model\": \"x\", ", key);
  EXPECT_EQ(h.status, 400);
  EXPECT_NE(h.body.find("\"error\":{\"message\":\"malformed JSON"), std::string::npos) << h.body;
  h = http(s.port(), "POST", "/v1/chat/completions",
           "{\"model\":\"" + model_id_ + "\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":\"hot\"}",
           key);
  EXPECT_EQ(h.status, 400);
  EXPECT_NE(h.body.find("\"param\":\"temperature\""), std::string::npos) << h.body;
  // a field the endpoint does not define: 400 unknown_parameter naming it
  h = http(s.port(), "POST", "/v1/chat/completions",
           "{\"model\":\"" + model_id_ + "\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temprature\":0}",
           key);
  EXPECT_EQ(h.status, 400);
  EXPECT_NE(h.body.find("\"param\":\"temprature\",\"code\":\"unknown_parameter\""), std::string::npos) << h.body;
  h = http(s.port(), "POST", "/v1/chat/completions",
           "{\"model\":\"" + model_id_ + "\",\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"nmae\":1}]}", key);
  EXPECT_EQ(h.status, 400);
  EXPECT_NE(h.body.find("\"param\":\"messages[0].nmae\""), std::string::npos) << h.body;
  h = http(s.port(), "POST", "/v1/completions", "{\"model\":\"" + model_id_ + "\",\"prompt\":\"x\",\"echo\":false,\"min_p\":0.1}", key);
  EXPECT_EQ(h.status, 400);
  EXPECT_NE(h.body.find("\"message\":\"Unknown parameter: 'min_p'.\""), std::string::npos) << h.body;
  EXPECT_EQ(http(s.port(), "GET", "/v1/completions", "", key).status, 405);
  EXPECT_EQ(http(s.port(), "GET", "/v2/nothing", "", key).status, 404);
  EXPECT_EQ(s.stop(), 0);
}

// A byte-level BPE tokenizer.json without merges (every byte its own token,
// ids = byte values; <s> 256 and </s> 257 special), for the template test.
std::string byte_tokenizer_json() {
  std::string vocab = "{";
  int n = 0;
  for (int b = 0; b < 256; b++) {
    bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    unsigned cp = (unsigned)b;
    if (!printable) {
      int k = 0;
      for (int c = 0; c < b; c++)
        if (!((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE))) k++;
      cp = 256 + (unsigned)k;
    }
    std::string u;
    if (cp < 0x80) {
      if (cp == '"' || cp == '\\') u = std::string("\\") + (char)cp;
      else u = std::string(1, (char)cp);
    } else {
      u += (char)(0xC0 | (cp >> 6));
      u += (char)(0x80 | (cp & 0x3F));
    }
    vocab += (n++ ? "," : "") + std::string("\"") + u + "\":" + std::to_string(b);
  }
  vocab += "}";
  return "{\"version\":\"1.0\",\"added_tokens\":[{\"id\":256,\"content\":\"<s>\",\"special\":true},"
         "{\"id\":257,\"content\":\"</s>\",\"special\":true}],\"normalizer\":null,"
         "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true},"
         "\"post_processor\":null,\"decoder\":{\"type\":\"ByteLevel\"},"
         "\"model\":{\"type\":\"BPE\",\"vocab\":" + vocab + ",\"merges\":[]}}";
}

TEST_F(ServerClientTest, ChatUsesTheModelsOwnTemplateWhenItHasOne) {
  // a nano container with a tokenizer and a chat template beside its manifest
  std::string dir = tmpdir() + "/nano-tmpl";
  if (!exists(dir + "/manifest.json")) {
    ASSERT_EQ(run({spill_, "gen", "--preset", "nano", dir}, "/dev/null", "/dev/null"), 0);
  }
  {
    std::ofstream(dir + "/tokenizer.json") << byte_tokenizer_json();
    std::ofstream(dir + "/tokenizer_config.json")
        << R"({"bos_token": "<s>", "eos_token": "</s>", "chat_template": )"
        << R"("{{ bos_token }}{% for m in messages %}{% if m['role'] == 'system' and not loop.first %})"
        << R"({{ raise_exception('a system message must come first') }}{% endif %})"
        << R"([{{ m['role'] }}] {{ m['content'] }}{{ eos_token }}
{% endfor %})"
        << R"({% if add_generation_prompt %}[assistant] {% endif %}"})";
  }
  Server s(spill_, dir, {});
  ASSERT_GT(s.port(), 0) << s.log();
  Http h = http(s.port(), "POST", "/v1/chat/completions",
                "{\"model\":\"" + model_id_ +
                    "\",\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}],\"max_tokens\":4,"
                    "\"temperature\":0}");
  ASSERT_EQ(h.status, 200) << h.body << s.log();
  EXPECT_NE(h.headers.find("X-Spill-Chat-Template: model"), std::string::npos) << h.headers;
  EXPECT_EQ(h.body.find("reasoning_content"), std::string::npos) << h.body;  // not XTML: no split
  // the rendered prompt, tokenized without an extra BOS (the template writes
  // "<s>") by the model directory's own tokenizer (the engine uses it,
  // engine/tok): every byte is a token (no merges) except the special "<s>"
  // and "</s>", one token each
  const std::string rendered = "<s>[user] Hello</s>\n[assistant] ";
  EXPECT_EQ(json_int(h.body, "prompt_tokens"),
            (long long)rendered.size() - (long long)(strlen("<s>") - 1) -
                (long long)(strlen("</s>") - 1))
      << h.body;
  h = http(s.port(), "GET", "/v1/models");
  EXPECT_NE(h.body.find("\"chat_template\":\"model\""), std::string::npos) << h.body;
  // the template's own exception is the client's error: 400 naming it
  h = http(s.port(), "POST", "/v1/chat/completions",
           "{\"model\":\"" + model_id_ +
               "\",\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"system\","
               "\"content\":\"b\"}]}");
  EXPECT_EQ(h.status, 400) << h.body;
  EXPECT_NE(h.body.find("a system message must come first"), std::string::npos) << h.body;
  EXPECT_EQ(s.stop(), 0);
}

// A string member at path (e.g. {"choices", "0", "message", "content"}) of a
// JSON text; absent -> `absent`.
std::string json_path_str(const std::string &json, std::vector<std::string> path,
                          const std::string &absent = "<absent>") {
  cJSON *root = cJSON_Parse(json.c_str());
  const cJSON *v = root;
  for (const auto &k : path) {
    if (!v) break;
    v = cJSON_IsArray(v) ? cJSON_GetArrayItem(v, atoi(k.c_str())) : cJSON_GetObjectItemCaseSensitive(v, k.c_str());
  }
  std::string r = cJSON_IsString(v) ? v->valuestring : absent;
  cJSON_Delete(root);
  return r;
}

// Kimi K3's chat format (XTML, issue 27): the template's generation prompt
// opens the assistant's think channel, so the reply is reasoning until the
// model closes it; OpenAI-compatible servers (llama.cpp's) return it as
// reasoning_content. A nano container with K3's four markers as special
// tokens and an XTML template in chat_template.jinja: nano never writes
// `<|close|>think<|sep|>`, so its whole reply is reasoning_content and
// content is "", streamed and not, the same text.
TEST_F(ServerClientTest, XtmlChatRepliesCarryTheThinkChannelAsReasoningContent) {
  std::string dir = tmpdir() + "/nano-xtml";
  if (!exists(dir + "/manifest.json")) {
    ASSERT_EQ(run({spill_, "gen", "--preset", "nano", dir}, "/dev/null", "/dev/null"), 0);
  }
  {
    std::string tj = byte_tokenizer_json();
    const std::string last = "{\"id\":257,\"content\":\"</s>\",\"special\":true}";
    size_t at = tj.find(last);
    ASSERT_NE(at, std::string::npos);
    tj.insert(at + last.size(),
              ",{\"id\":258,\"content\":\"<|open|>\",\"special\":true},"
              "{\"id\":259,\"content\":\"<|close|>\",\"special\":true},"
              "{\"id\":260,\"content\":\"<|sep|>\",\"special\":true},"
              "{\"id\":261,\"content\":\"<|end_of_msg|>\",\"special\":true}");
    std::ofstream(dir + "/tokenizer.json") << tj;
    std::ofstream(dir + "/tokenizer_config.json") << R"({"bos_token": "<s>", "eos_token": "</s>"})";
    std::ofstream(dir + "/chat_template.jinja")
        << "{%- for m in messages -%}<|open|>message role=\"{{ m.role }}\"<|sep|>{{ m.content }}"
           "<|close|>message<|sep|><|end_of_msg|>{%- endfor -%}"
           "{%- if add_generation_prompt -%}<|open|>message role=\"assistant\"<|sep|>"
           "<|open|>think<|sep|>{%- endif -%}";
  }
  Server s(spill_, dir, {});
  ASSERT_GT(s.port(), 0) << s.log();
  const std::string req = "{\"model\":\"" + model_id_ +
                          "\",\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}],"
                          "\"max_tokens\":12,\"temperature\":0";
  Http h = http(s.port(), "POST", "/v1/chat/completions", req + "}");
  ASSERT_EQ(h.status, 200) << h.body << s.log();
  EXPECT_NE(h.headers.find("X-Spill-Chat-Template: model"), std::string::npos) << h.headers;
  // the prompt: the markers are one token each, the rest one token a byte
  const std::string rendered =
      "<|open|>message role=\"user\"<|sep|>Hello<|close|>message<|sep|><|end_of_msg|>"
      "<|open|>message role=\"assistant\"<|sep|><|open|>think<|sep|>";
  long long want = (long long)rendered.size();
  for (const char *m : {"<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"})
    for (size_t i = rendered.find(m); i != std::string::npos; i = rendered.find(m, i + 1))
      want -= (long long)strlen(m) - 1;
  EXPECT_EQ(json_int(h.body, "prompt_tokens"), want) << h.body;
  EXPECT_GT(json_int(h.body, "completion_tokens"), 0) << h.body;
  std::string reasoning = json_path_str(h.body, {"choices", "0", "message", "reasoning_content"});
  EXPECT_EQ(json_path_str(h.body, {"choices", "0", "message", "content"}), "") << h.body;
  EXPECT_NE(reasoning, "<absent>") << h.body;
  EXPECT_FALSE(reasoning.empty()) << h.body;
  // streamed: delta.reasoning_content pieces, no content, the same text
  h = http(s.port(), "POST", "/v1/chat/completions", req + ",\"stream\":true}");
  ASSERT_EQ(h.status, 200) << h.body;
  std::string r2, c2, line;
  std::istringstream in(h.body);
  int n_reasoning = 0;
  while (std::getline(in, line)) {
    if (line.rfind("data: {", 0) != 0) continue;
    std::string ev = line.substr(6);
    std::string r = json_path_str(ev, {"choices", "0", "delta", "reasoning_content"}, "");
    n_reasoning += !r.empty();
    r2 += r;
    c2 += json_path_str(ev, {"choices", "0", "delta", "content"}, "");
  }
  EXPECT_EQ(r2, reasoning) << h.body;
  EXPECT_EQ(c2, "") << h.body;
  EXPECT_GE(n_reasoning, 1) << h.body;
  EXPECT_EQ(s.stop(), 0);
}

// Issue 26: a model's chat template is untrusted; a runaway one (nested
// loops of 100000) used to hold the engine until something outside killed
// the server. It renders under the budget now: the request fails 400 naming
// the step budget, and the server answers the next request.
TEST_F(ServerClientTest, RunawayChatTemplateFailsWithTheBudgetAndFreesTheEngine) {
  std::string dir = tmpdir() + "/nano-runaway";
  if (!exists(dir + "/manifest.json")) {
    ASSERT_EQ(run({spill_, "gen", "--preset", "nano", dir}, "/dev/null", "/dev/null"), 0);
  }
  {
    std::ofstream(dir + "/tokenizer.json") << byte_tokenizer_json();
    std::ofstream(dir + "/tokenizer_config.json")
        << R"({"bos_token": "<s>", "eos_token": "</s>", "chat_template": )"
        << R"("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}x"})";
  }
  Server s(spill_, dir, {});
  ASSERT_GT(s.port(), 0) << s.log();
  Http h = http(s.port(), "POST", "/v1/chat/completions",
                "{\"model\":\"" + model_id_ +
                    "\",\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}],\"max_tokens\":2}");
  EXPECT_EQ(h.status, 400) << h.body << s.log();
  EXPECT_NE(h.body.find("evaluation steps"), std::string::npos) << h.body;
  h = http(s.port(), "POST", "/v1/completions",
           "{\"model\":\"" + model_id_ + "\",\"prompt\":\"x\",\"max_tokens\":2}");
  EXPECT_EQ(h.status, 200) << h.body << s.log();
  EXPECT_EQ(s.stop(), 0);
}

}  // namespace

namespace {

// Valid UTF-8 (RFC 3629: no overlongs, surrogates, or code points past U+10FFFF).
bool valid_utf8(const std::string &s) {
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = (unsigned char)s[i];
    int n = c < 0x80 ? 0 : (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2 : (c & 0xF8) == 0xF0 ? 3 : -1;
    if (n < 0 || (n == 1 && c < 0xC2) || c > 0xF4 || i + n >= s.size() + (n ? 0 : 1)) return false;
    if (i + (size_t)n >= s.size() && n) return false;
    unsigned cp = n == 0 ? c : n == 1 ? (c & 0x1F) : n == 2 ? (c & 0x0F) : (c & 0x07);
    for (int k = 1; k <= n; k++) {
      unsigned char d = (unsigned char)s[i + k];
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    if ((n == 2 && cp < 0x800) || (n == 3 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += (size_t)n + 1;
  }
  return true;
}

// An OpenAI error object: {"error":{"message":"...","type":"...",...}} and
// nothing else (a light structural check; the UTF-8 check is separate).
bool is_error_json(const std::string &b) {
  return b.rfind("{\"error\":{\"message\":\"", 0) == 0 && b.find("\"type\":\"") != std::string::npos &&
         (b.back() == '}' || b.substr(b.size() - 2) == "}\n");
}

// Sends raw bytes on a new connection; returns what came back within
// `secs` seconds (until the server closes), and how long it took.
std::string raw_exchange(int port, const std::string &bytes, double secs, double *took = nullptr) {
  int fd = connect_to(port);
  if (fd < 0) return "";
  auto t0 = std::chrono::steady_clock::now();
  send_all(fd, bytes);
  std::string all;
  char buf[65536];
  while (std::chrono::steady_clock::now() - t0 < std::chrono::duration<double>(secs)) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    all.append(buf, (size_t)n);
  }
  if (took) *took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  close(fd);
  return all;
}

std::string body_of(const std::string &resp) {
  size_t he = resp.find("\r\n\r\n");
  return he == std::string::npos ? "" : resp.substr(he + 4);
}

int status_of(const std::string &resp) {
  int st = 0;
  sscanf(resp.c_str(), "HTTP/1.%*d %d", &st);
  return st;
}

}  // namespace

// Issue 26 item 9: idle and half-sent connections cannot lock clients out.
// 300 sockets that send nothing and 40 that stall inside their header are
// held open; /health (no key) and an authenticated /v1/models still answer
// at once, and a stalled connection is answered 408 within the header
// deadline (10 s).
TEST_F(ServerClientTest, IdleSocketsDoNotLockOutHealthOrAuthenticatedClients) {
  Server s(spill_, model_, {"--api-key", "k", "--max-queue", "1", "--quiet"});
  ASSERT_GT(s.port(), 0) << s.log();
  std::vector<int> idle;
  for (int i = 0; i < 300; i++) {
    int fd = connect_to(s.port());
    if (fd >= 0) idle.push_back(fd);
  }
  for (int i = 0; i < 40; i++) {
    int fd = connect_to(s.port());
    if (fd < 0) continue;
    send_all(fd, "GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bear");
    idle.push_back(fd);
  }
  auto t0 = std::chrono::steady_clock::now();
  Http h = http(s.port(), "GET", "/health");
  EXPECT_EQ(h.status, 200) << "health locked out by " << idle.size() << " idle sockets";
  h = http(s.port(), "GET", "/v1/models", "", "Authorization: Bearer k\r\n");
  EXPECT_EQ(h.status, 200) << h.body;
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(secs, 5.0);
  // the last stalled one: answered 408 (JSON) and closed by the deadline
  int fd = idle.back();
  std::string got;
  char buf[4096];
  auto t1 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t1 < std::chrono::seconds(20)) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 200) <= 0) continue;
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, (size_t)n);
  }
  EXPECT_EQ(status_of(got), 408) << got;
  EXPECT_TRUE(is_error_json(body_of(got))) << got;
  for (int f : idle) close(f);
  EXPECT_EQ(s.stop(), 0);
}

// Issue 26 item 17: framing errors are OpenAI JSON errors, promptly; error
// bodies are valid UTF-8 whatever the client sent; a 500 names no server path.
TEST_F(ServerClientTest, FramingErrorsAreJsonAndErrorBodiesValidUtf8) {
  Server s(spill_, model_, {"--quiet"});
  ASSERT_GT(s.port(), 0) << s.log();
  const std::string head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n";
  struct Case {
    std::string extra, body;
    int status;
  } cases[] = {
      {"Content-Length: abc\r\n", "{}", 400},
      {"Content-Length: 99999999999999999999999\r\n", "{}", 413},
      {"Content-Length: 2\r\nContent-Length: 3\r\n", "{}", 400},
      {"Transfer-Encoding: gzip\r\n", "{}", 411},
      {"Transfer-Encoding: chunked\r\n", "zz\r\n{}\r\n0\r\n\r\n", 411},
      {"", "{}", 411},
      {"Bad Header Line\r\nContent-Length: 2\r\n", "{}", 400},
  };
  for (const Case &c : cases) {
    double took = 0;
    std::string r = raw_exchange(s.port(), head + c.extra + "\r\n" + c.body, 10, &took);
    EXPECT_EQ(status_of(r), c.status) << c.extra << r;
    EXPECT_TRUE(is_error_json(body_of(r))) << c.extra << r;
    EXPECT_NE(r.find("Content-Type: application/json"), std::string::npos) << r;
    EXPECT_LT(took, 5.0) << c.extra;
  }
  // a model name with invalid bytes: the body is not JSON (RFC 8259 text is
  // UTF-8), a 400 naming the byte; a 3-byte character across byte 80 of an
  // unknown model's name: a 404 whose echo is cut between characters
  struct Named {
    std::string model;
    int status;
    const char *says;
  } named[] = {{std::string("bad\xff\xfe name \xc3"), 400, "invalid UTF-8"},
               {std::string(79, 'a') + "\xe2\x82\xac" + "tail", 404, "aaaa"}};
  for (const Named &n : named) {
    Http h = http(s.port(), "POST", "/v1/completions", "{\"model\":\"" + n.model + "\",\"prompt\":\"x\"}");
    EXPECT_EQ(h.status, n.status) << h.body;
    EXPECT_NE(h.body.find(n.says), std::string::npos) << h.body;
    EXPECT_TRUE(valid_utf8(h.body)) << h.body;
    EXPECT_TRUE(is_error_json(h.body)) << h.body;
  }
  // an unknown key with invalid bytes is named in the error: still valid UTF-8
  Http h = http(s.port(), "POST", "/v1/completions",
                "{\"model\":\"" + model_id_ + "\",\"prompt\":\"x\",\"k\xff\xc3\":1}");
  EXPECT_EQ(h.status, 400) << h.body;
  EXPECT_TRUE(valid_utf8(h.body)) << h.body;
  EXPECT_EQ(s.stop(), 0);
}

TEST_F(ServerClientTest, AServerErrorNamesNoServerPath) {
  std::string dir = tmpdir() + "/nano-trunc";
  ASSERT_EQ(run({"/bin/cp", "-r", model_, dir}), 0);
  Server s(spill_, dir, {"--cache-slots", "0", "--storage", "pagecache", "--quiet"});
  ASSERT_GT(s.port(), 0) << s.log();
  // every expert read now fails (short reads past the end of the bank)
  for (int i = 0; i < 8; i++) {
    char name[64];
    snprintf(name, sizeof name, "/experts-%03d.bin", i);
    if (exists(dir + name)) ASSERT_EQ(truncate((dir + name).c_str(), 64), 0);
  }
  Http h = http(s.port(), "POST", "/v1/completions",
                "{\"model\":\"" + model_id_ + "\",\"prompt\":\"hello\",\"max_tokens\":4}");
  EXPECT_EQ(h.status, 500) << h.body;
  EXPECT_TRUE(is_error_json(h.body)) << h.body;
  EXPECT_EQ(h.body.find(tmpdir()), std::string::npos) << "a server path in the reply: " << h.body;
  EXPECT_EQ(h.body.find("experts-"), std::string::npos) << h.body;
  EXPECT_EQ(s.stop(), 0);
}

// Issue 26 item 16: SIGTERM with requests queued answers each 503 (JSON),
// and a client that half-closes after its request still gets its reply.
TEST_F(ServerClientTest, ShutdownAnswersQueuedRequests503AndHalfCloseIsNotGone) {
  Server s(spill_, model_, {"--cache-slots", "4", "--io-throttle", "1M", "--max-queue", "8", "--quiet"});
  ASSERT_GT(s.port(), 0) << s.log();
  // half-close: the request, then shutdown(SHUT_WR); the reply must come whole
  {
    int fd = connect_to(s.port());
    ASSERT_GE(fd, 0);
    send_all(fd, request_text("POST", "/v1/completions",
                              "{\"model\":\"" + model_id_ + "\",\"prompt\":\"hi\",\"max_tokens\":3,\"temperature\":0}", ""));
    shutdown(fd, SHUT_WR);
    std::string got;
    char buf[4096];
    for (;;) {
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 60000) <= 0) break;
      ssize_t n = recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      got.append(buf, (size_t)n);
    }
    close(fd);
    EXPECT_EQ(status_of(got), 200) << got;
    EXPECT_EQ(json_int(got, "completion_tokens"), 3) << got;
  }
  // one long generation running, three queued behind it. Greedy, with the
  // prompt of ClientDisconnectCancelsTheGeneration (sampled, nano can draw
  // its EOS after a few hundred tokens and let the queue run)
  int run_fd = connect_to(s.port());
  ASSERT_GE(run_fd, 0);
  send_all(run_fd, request_text("POST", "/v1/completions",
                                "{\"model\":\"" + model_id_ +
                                    "\",\"prompt\":\"tell me everything\",\"max_tokens\":3000,"
                                    "\"temperature\":0,\"stream\":true}",
                                ""));
  {  // running before the others connect: the front door hands whole
     // requests on in the order their heads complete, not the order sent,
     // so a request sent first can still be queued behind the next one
    std::string first;
    char buf[4096];
    while (first.find("\"text\"") == std::string::npos) {
      pollfd p{run_fd, POLLIN, 0};
      ASSERT_GT(poll(&p, 1, 30000), 0) << first;
      ssize_t n = recv(run_fd, buf, sizeof buf, 0);
      ASSERT_GT(n, 0) << first;
      first.append(buf, (size_t)n);
    }
  }
  std::vector<int> q;
  for (int i = 0; i < 3; i++) {
    int fd = connect_to(s.port());
    ASSERT_GE(fd, 0);
    send_all(fd, request_text("POST", "/v1/completions",
                              "{\"model\":\"" + model_id_ + "\",\"prompt\":\"q\",\"max_tokens\":4}", ""));
    q.push_back(fd);
  }
  for (int i = 0; i < 600; i++) {  // until all three are queued (60 s)
    if (metric(http(s.port(), "GET", "/metrics").body, "spill_queue_depth") == 3) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(metric(http(s.port(), "GET", "/metrics").body, "spill_queue_depth"), 3);
  {  // the long generation is still running: its stream has not ended
    std::string so_far;
    char buf[4096];
    ssize_t n;
    while ((n = recv(run_fd, buf, sizeof buf, MSG_DONTWAIT)) > 0) so_far.append(buf, (size_t)n);
    ASSERT_EQ(so_far.find("[DONE]"), std::string::npos) << "the long generation ended by itself";
  }
  kill(s.pid(), SIGTERM);
  for (int fd : q) {
    std::string got;
    char buf[4096];
    for (;;) {
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 20000) <= 0) break;
      ssize_t n = recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      got.append(buf, (size_t)n);
    }
    close(fd);
    EXPECT_EQ(status_of(got), 503) << "a queued request got: '" << got << "'";
    EXPECT_TRUE(is_error_json(body_of(got))) << got;
  }
  close(run_fd);
  EXPECT_EQ(s.stop(), 0);
}
