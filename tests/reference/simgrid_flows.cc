// An independent reference for the planner's flow-level network model (src/plan/max_min.h):
// SimGrid's CM02 model, configured as a pure max-min fluid model, runs the same flows over the
// same links and reports when each one finishes.
//
//   simgrid_flows SCENARIO.json [OUT.json] [--latency=links|start] [--cfg=KEY:VALUE ...]
//
// SCENARIO: {"links":[{"gbps":G,"latency_us":L},...],
//            "flows":[{"links":[ids...],"bytes":B,"start_us":S},...]}   (start_us optional)
// gbps is GB/s (1e9 bytes/s), bytes must be whole (SimGrid counts bytes in uint64).
// Output: {"finish_us":[...]}, the simulated completion time of each flow, to OUT or stdout.
//
// --latency=links (default): SimGrid links carry their latencies. CM02 then weights each flow's
//   share by its route latency (the flow's max-min penalty is the sum of its links' latencies,
//   network_cm02.cpp: `sharing_penalty_ = latency`, kept even with weight-S = 0), so flows with
//   different route latencies do NOT share equally: an RTT-unfair weighted max-min.
// --latency=start: SimGrid links have no latency; each flow instead starts sending at
//   start_us + (sum of its links' latencies). Every flow then has penalty 1: plain max-min, the
//   model the planner implements (PathFlow::start_us = path latency).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <simgrid/s4u.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "formats/json.h"

namespace sg4 = simgrid::s4u;

namespace {

struct LinkSpec {
  double bytes_per_s = 0;
  double latency_s = 0;
};

struct FlowSpec {
  std::vector<size_t> links;
  uint64_t bytes = 0;
  double start_s = 0;
};

struct Scenario {
  std::vector<LinkSpec> links;
  std::vector<FlowSpec> flows;
};

Scenario read_scenario(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open scenario " + path);
  std::stringstream text;
  text << in.rdbuf();
  tpf::json::Value root = tpf::json::parse(text.str(), path);
  Scenario s;
  for (const tpf::json::Value& l : root.at("links").as_array()) {
    double gbps = l.at("gbps").as_double();
    double latency_us = l.find("latency_us") ? l.at("latency_us").as_double() : 0.0;
    if (!(gbps > 0) || !(latency_us >= 0))
      throw std::runtime_error(path + ": link " + std::to_string(s.links.size()) +
                               " needs gbps > 0 and latency_us >= 0");
    s.links.push_back({gbps * 1e9, latency_us * 1e-6});
  }
  for (const tpf::json::Value& f : root.at("flows").as_array()) {
    FlowSpec flow;
    std::string name = path + ": flow " + std::to_string(s.flows.size());
    for (const tpf::json::Value& id : f.at("links").as_array()) {
      int64_t i = id.as_int();
      if (i < 0 || static_cast<size_t>(i) >= s.links.size())
        throw std::runtime_error(name + " names link " + std::to_string(i) +
                                 ", which does not exist");
      flow.links.push_back(static_cast<size_t>(i));
    }
    if (flow.links.empty()) throw std::runtime_error(name + " crosses no link");
    double bytes = f.at("bytes").as_double();
    if (!(bytes >= 0) || bytes != std::floor(bytes) || bytes > 9.0e15)
      throw std::runtime_error(name + ": bytes must be a whole number >= 0");
    flow.bytes = static_cast<uint64_t>(bytes);
    flow.start_s = f.find("start_us") ? f.at("start_us").as_double() * 1e-6 : 0.0;
    s.flows.push_back(std::move(flow));
  }
  return s;
}

// Hosts for `flows` flows with one distinct ordered host pair (hence one route) each: n hosts
// give n(n-1) pairs, so n ~ sqrt(flows). One host pair per flow would need 2 hosts per flow and a
// Full zone stores an n x n route table (8,192 hosts = 67M entries for 4,096 flows).
// "l12", "h3": built with append, as GCC 12 warns (-Wrestrict, a false positive) on "l" + string.
std::string numbered(const char* prefix, size_t i) {
  std::string name = prefix;
  name += std::to_string(i);
  return name;
}

size_t hosts_for(size_t flows) {
  size_t n = 2;
  while (n * (n - 1) < flows) ++n;
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  std::string scenario_path, out_path;
  bool latency_on_links = true;
  // SimGrid's own options first, so the user's --cfg and --log come after and win.
  std::vector<std::string> sg_args = {
      argv[0],
      // CM02: latency factor 1, bandwidth factor 1, weight-S 0 (no bandwidth-dependent RTT term).
      "--cfg=network/model:CM02",
      // No TCP window bound (rate <= gamma / (2 latency)): flows are limited by links only.
      "--cfg=network/TCP-gamma:0",
      // No 5% reverse-direction traffic on the back route.
      "--cfg=network/crosstraffic:0",
      // Event dates closer than this (seconds; default 1e-9) are merged: 1 ns is 1e-6 of a 1 ms
      // phase, so tighten it to 1 ps. maxmin/precision (1e-5 bytes/s, absolute) is already at
      // the double rounding of 10-100 GB/s links and stays.
      "--cfg=surf/precision:1e-12",
      // Small actor stacks: one actor per flow, thousands of flows.
      "--cfg=contexts/stack-size:256",
      "--log=root.thres:critical",
  };
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--latency=links") {
      latency_on_links = true;
    } else if (a == "--latency=start") {
      latency_on_links = false;
    } else if (a.rfind("--cfg=", 0) == 0 || a.rfind("--log=", 0) == 0) {
      sg_args.push_back(a);
    } else if (scenario_path.empty()) {
      scenario_path = a;
    } else if (out_path.empty()) {
      out_path = a;
    } else {
      std::cerr << "simgrid_flows: unexpected argument " << a << "\n";
      return 2;
    }
  }
  if (scenario_path.empty()) {
    std::cerr << "usage: simgrid_flows SCENARIO.json [OUT.json] [--latency=links|start] "
                 "[--cfg=KEY:VALUE ...]\n";
    return 2;
  }

  Scenario scenario;
  try {
    scenario = read_scenario(scenario_path);
  } catch (const std::exception& e) {
    std::cerr << "simgrid_flows: " << e.what() << "\n";
    return 1;
  }

  std::vector<char*> sg_argv;
  for (std::string& a : sg_args) sg_argv.push_back(a.data());
  sg_argv.push_back(nullptr);
  int sg_argc = static_cast<int>(sg_args.size());
  sg4::Engine engine(&sg_argc, sg_argv.data());

  auto* zone = sg4::create_full_zone("fabric");
  std::vector<sg4::Link*> links;
  for (size_t i = 0; i < scenario.links.size(); ++i) {
    sg4::Link* link = zone->create_link(numbered("l", i), scenario.links[i].bytes_per_s);
    link->set_latency(latency_on_links ? scenario.links[i].latency_s : 0.0);
    link->set_sharing_policy(sg4::Link::SharingPolicy::SHARED);
    links.push_back(link->seal());
  }
  size_t n_hosts = hosts_for(scenario.flows.size());
  std::vector<sg4::Host*> hosts;
  for (size_t h = 0; h < n_hosts; ++h)
    hosts.push_back(zone->create_host(numbered("h", h), 1e9)->seal());

  std::vector<double> finish_s(scenario.flows.size(), -1.0);
  size_t pair = 0;
  for (size_t f = 0; f < scenario.flows.size(); ++f, ++pair) {
    if (pair / n_hosts == pair % n_hosts) ++pair;  // skip the diagonal (a host to itself)
    sg4::Host* src = hosts[pair / n_hosts];
    sg4::Host* dst = hosts[pair % n_hosts];
    const FlowSpec& flow = scenario.flows[f];
    std::vector<sg4::LinkInRoute> route;
    double path_latency_s = 0;
    for (size_t l : flow.links) {
      route.emplace_back(links[l]);
      path_latency_s += scenario.links[l].latency_s;
    }
    zone->add_route(src->get_netpoint(), dst->get_netpoint(), nullptr, nullptr, route, false);
    double send_at = flow.start_s + (latency_on_links ? 0.0 : path_latency_s);
    uint64_t bytes = flow.bytes;
    double* done = &finish_s[f];
    sg4::Actor::create(numbered("flow", f), src, [src, dst, bytes, send_at, done] {
      if (send_at > 0) sg4::this_actor::sleep_until(send_at);
      sg4::Comm::sendto(src, dst, bytes);
      *done = sg4::Engine::get_clock();
    });
  }
  zone->seal();
  engine.run();

  tpf::json::Array finish_us;
  for (size_t f = 0; f < finish_s.size(); ++f) {
    if (finish_s[f] < 0) {
      std::cerr << "simgrid_flows: flow " << f << " did not finish\n";
      return 1;
    }
    finish_us.emplace_back(finish_s[f] * 1e6);
  }
  tpf::json::Object out;
  out.emplace_back("finish_us", tpf::json::Value(std::move(finish_us)));
  std::string text = tpf::json::dump(tpf::json::Value(std::move(out))) + "\n";
  if (out_path.empty()) {
    std::cout << text;
  } else {
    std::ofstream o(out_path);
    o << text;
    if (!o) {
      std::cerr << "simgrid_flows: cannot write " << out_path << "\n";
      return 1;
    }
  }
  return 0;
}
