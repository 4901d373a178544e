// A render::renderer for unit tests: no Python, no worker. The pipe comes from the
// file's shebang or request::default_pipe as in render.hpp; "jinja" only substitutes
// `{{ a.b.c }}` / `{{ grains['x'] }}` with the context's value (a string or JSON), "yaml"
// parses with sylvite's YAML parser, "json" with nlohmann. Any other renderer name, or
// one refused by the black/white lists, is `unsupported_renderer`. Test shebangs:
//   #!fake-error <text>  -> render_error with <text>
//   #!fake-sleep         -> sleeps until the request's timeout, then `timeout`
// Every request is recorded (requests()).
// Thread-safety: render() and requests() lock.
#pragma once
#include <algorithm>
#include <mutex>
#include <thread>
#include <vector>

#include "core/config/config.hpp"
#include "core/render/render.hpp"
#include "core/util/files.hpp"

namespace sylvite::test {

class fake_renderer final : public render::renderer {
 public:
  render::outcome render(const render::request& r) override {
    {
      std::lock_guard lk(mu_);
      log_.push_back(r);
    }
    render::outcome o;
    auto text = util::read_file(r.path);
    if (!text) {
      o.st = render::outcome::status::render_error;
      o.error = "cannot read " + r.path.string();
      return o;
    }
    std::string body = *text;
    std::string pipe = r.default_pipe;
    if (body.starts_with("#!")) {
      auto nl = body.find('\n');
      pipe = body.substr(2, nl == std::string::npos ? std::string::npos : nl - 2);
      body = nl == std::string::npos ? std::string() : body.substr(nl + 1);
    }
    if (pipe.starts_with("fake-error")) {
      o.st = render::outcome::status::render_error;
      o.error = pipe.size() > 11 ? pipe.substr(11) : "fake error";
      return o;
    }
    if (pipe == "fake-sleep") {
      std::this_thread::sleep_for(r.timeout);
      o.st = render::outcome::status::timeout;
      o.error = "timed out";
      return o;
    }
    std::vector<std::string> parts;
    for (std::size_t pos = 0; pos <= pipe.size();) {
      auto bar = pipe.find('|', pos);
      if (bar == std::string::npos) bar = pipe.size();
      std::string p = pipe.substr(pos, bar - pos);
      p.erase(0, p.find_first_not_of(' '));
      p.erase(p.find_last_not_of(' ') + 1);
      if (!p.empty()) parts.push_back(p);
      pos = bar + 1;
    }
    for (const auto& p : parts) {
      bool known = p == "jinja" || p == "yaml" || p == "json";
      bool refused = std::find(r.blacklist.begin(), r.blacklist.end(), p) != r.blacklist.end() ||
                     (!r.whitelist.empty() && std::find(r.whitelist.begin(), r.whitelist.end(), p) == r.whitelist.end());
      if (!known || refused) {
        o.st = render::outcome::status::unsupported_renderer;
        o.error = r.path.string() + ": the renderer '" + p + "' is not supported by sylvite";
        return o;
      }
    }
    wire::value data = body;
    for (const auto& p : parts) {
      std::string in = data.is_string() ? data.get<std::string>() : data.dump();
      if (p == "jinja") {
        data = substitute(in, r.context);
      } else if (p == "yaml") {
        auto v = config::parse_yaml(in);
        if (!v) {
          o.st = render::outcome::status::render_error;
          o.error = v.error();
          return o;
        }
        data = std::move(*v);
      } else {
        data = wire::value::parse(in, nullptr, false);
        if (data.is_discarded()) {
          o.st = render::outcome::status::render_error;
          o.error = "bad json";
          return o;
        }
      }
    }
    if (data.is_null() || (data.is_string() && data.get<std::string>().empty())) data = wire::value::object();
    o.st = render::outcome::status::ok;
    o.data = std::move(data);
    return o;
  }

  std::vector<render::request> requests() {
    std::lock_guard lk(mu_);
    return log_;
  }
  const render::request* find(const std::string& file_suffix) {
    std::lock_guard lk(mu_);
    for (auto it = log_.rbegin(); it != log_.rend(); ++it)
      if (it->path.string().ends_with(file_suffix)) {
        found_ = *it;
        return &found_;
      }
    return nullptr;
  }

 private:
  static std::string substitute(const std::string& in, const wire::value& ctx) {
    std::string out;
    std::size_t pos = 0;
    while (true) {
      auto open = in.find("{{", pos);
      if (open == std::string::npos) break;
      auto close = in.find("}}", open);
      if (close == std::string::npos) break;
      out += in.substr(pos, open - pos);
      std::string expr = in.substr(open + 2, close - open - 2);
      expr.erase(0, expr.find_first_not_of(' '));
      expr.erase(expr.find_last_not_of(' ') + 1);
      // grains['x'] -> grains.x
      std::string path;
      for (char ch : expr) {
        if (ch == '[') path += '.';
        else if (ch != ']' && ch != '\'' && ch != '"') path += ch;
      }
      const wire::value* v = &ctx;
      for (std::size_t p = 0; v && p <= path.size();) {
        auto dot = path.find('.', p);
        if (dot == std::string::npos) dot = path.size();
        std::string k = path.substr(p, dot - p);
        v = v->is_object() && v->contains(k) ? &(*v)[k] : nullptr;
        p = dot + 1;
      }
      if (v) out += v->is_string() ? v->get<std::string>() : v->dump();
      pos = close + 2;
    }
    return out + in.substr(pos);
  }

  std::mutex mu_;
  std::vector<render::request> log_;
  render::request found_;
};

}  // namespace sylvite::test
