// `tpf bench` and `tpf demo` as a user runs them: the table has one checked row per size, the JSON
// is what `tpf plan calibrate` reads without help, and bad options are usage errors naming them.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "plan/calibration.h"
#include "support/run_tpf.h"
#include "support/scratch_dir.h"
#include "tpf/error.h"

#ifndef TPF_BINARY
#error "TPF_BINARY must name the tpf executable under test"
#endif

namespace tpf::testing {
namespace {

// `tpf run -n N -- tpf ARGS...`
Outcome run_on_ranks(int n, std::vector<std::string> args, std::vector<std::string> env = {}) {
  std::vector<std::string> all = {"run", "-n", std::to_string(n), "--", TPF_BINARY};
  all.insert(all.end(), args.begin(), args.end());
  return run_tpf(all, env, {}, std::chrono::milliseconds(60000));
}

// The table's data rows: the lines that do not start with '#', split on blanks.
std::vector<std::vector<std::string>> table_rows(const std::string& out) {
  std::vector<std::vector<std::string>> rows;
  for (const std::string& line : lines_of(out)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::vector<std::string> row;
    for (std::string field; fields >> field;) row.push_back(field);
    if (!row.empty()) rows.push_back(row);
  }
  return rows;
}

TEST(BenchCli, TableHasOneCheckedRowPerSizeUnderEitherSpelling) {
  for (const char* spelling : {"send_recv", "sendrecv"}) {
    const Outcome r = run_on_ranks(
        2, {"bench", spelling, "-b", "8", "-e", "512", "-f", "4", "-n", "2", "-w", "1"});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_TRUE(contains(r.out, "# tpf bench send_recv: nranks 2")) << r.out;
    const auto rows = table_rows(r.out);
    ASSERT_EQ(rows.size(), 4u) << r.out;
    const char* sizes[] = {"8", "32", "128", "512"};
    for (size_t i = 0; i < rows.size(); ++i) {
      // size count type redop root | time algbw busbw #wrong | in-place: N/A x 4
      ASSERT_EQ(rows[i].size(), 13u) << r.out;
      EXPECT_EQ(rows[i][0], sizes[i]);
      EXPECT_EQ(rows[i][2], "f32");
      EXPECT_EQ(rows[i][8], "0") << "wrong elements in row " << i << ":\n" << r.out;
      EXPECT_EQ(rows[i][9], "N/A") << "send_recv has no in-place form";
    }
    EXPECT_TRUE(contains(r.out, "# Out of bounds values : 0 OK")) << r.out;
  }
}

TEST(BenchCli, ReductionsAreCheckedInBothPlacements) {
  const Outcome r = run_on_ranks(
      2, {"bench", "reduce_scatter", "-b", "64", "-e", "256", "-d", "bf16", "-n", "2", "-w", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto rows = table_rows(r.out);
  ASSERT_EQ(rows.size(), 3u) << r.out;
  for (const auto& row : rows) {
    ASSERT_EQ(row.size(), 13u) << r.out;
    EXPECT_EQ(row[3], "sum");
    EXPECT_EQ(row[8], "0") << r.out;   // out of place
    EXPECT_EQ(row[12], "0") << r.out;  // in place
  }
}

// --placement: one form alone is measured and checked, the other's columns read N/A, the JSON has
// null there, and the calibration reads the one that ran.
TEST(BenchCli, EachPlacementAloneIsMeasuredCheckedAndCalibrated) {
  ScratchDir dir;
  for (const char* placement : {"in-place", "oop"}) {
    const bool in_place = std::string(placement) == "in-place";
    const std::string path = dir / (std::string(placement) + ".json");
    const Outcome r = run_on_ranks(2,
                                   {"bench", "all_reduce", "-b", "1K", "-e", "4K", "-n", "2", "-w",
                                    "1", "--placement", placement, "--json", path},
                                   {"TPF_ALLREDUCE_ALGO=two_shot"});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    const auto rows = table_rows(r.out);
    ASSERT_EQ(rows.size(), 3u) << r.out;
    for (const auto& row : rows) {
      ASSERT_EQ(row.size(), 13u) << r.out;
      EXPECT_EQ(row[in_place ? 5 : 9], "N/A") << r.out;  // the time of the form left out
      EXPECT_EQ(row[in_place ? 12 : 8], "0") << r.out;   // the one measured, checked
    }
    const std::string json = read_file(path);
    EXPECT_TRUE(contains(json, in_place ? "\"oop\":null" : "\"ip\":null")) << json;
    const plan::BenchFile file = plan::parse_bench_json(json, path);
    ASSERT_EQ(file.measurements.size(), 3u) << json;
    for (const plan::ShmMeasurement& m : file.measurements) {
      EXPECT_EQ(m.in_place, in_place) << m.source;
      EXPECT_TRUE(contains(m.source, in_place ? ".ip" : ".oop")) << m.source;
    }
  }
}

// --async 1: the *_async forms, waited for at once, checked like the blocking ones; the header
// and the JSON say so. --async timed: the same, waited for with a time limit; --async poll: the
// same, polled with Work::test.
TEST(BenchCli, AsyncCallsAreCheckedAndReported) {
  ScratchDir dir;
  const std::vector<std::tuple<std::string, std::string, std::string>> forms = {
      {"1", "warmup 1, async\n", "wait"},
      {"timed", "warmup 1, async, timed waits\n", "timed"},
      {"poll", "warmup 1, async, polled\n", "poll"}};
  for (const auto& [wait, heading, json_wait] : forms) {
    for (const char* collective : {"send_recv", "all_reduce", "gather"}) {
      const std::string path = dir / (std::string(collective) + wait + ".json");
      const Outcome r = run_on_ranks(3, {"bench", collective, "-b", "64", "-e", "4K", "-f", "8",
                                         "-n", "3", "-w", "1", "--async", wait, "--json", path});
      ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
      EXPECT_TRUE(contains(r.out, heading)) << r.out;
      const auto rows = table_rows(r.out);
      ASSERT_EQ(rows.size(), 3u) << r.out;  // 64 B, 512 B, 4 KiB
      for (const auto& row : rows) EXPECT_EQ(row[8], "0") << collective << ":\n" << r.out;
      const std::string json = read_file(path);
      EXPECT_TRUE(contains(json, "\"async\":true")) << json;
      EXPECT_TRUE(contains(json, "\"wait\":\"" + json_wait + "\"")) << json;
    }
  }
}

// --compute-us: the caller's own work per call (a sleep), before a blocking call and between issue
// and wait of an async one; the calls are still checked, and the header and the JSON say so.
TEST(BenchCli, ComputeBetweenCallsIsReportedAndTheResultsChecked) {
  ScratchDir dir;
  for (const char* async : {"0", "1"}) {
    const bool is_async = std::string(async) == "1";
    const std::string path = dir / (std::string("compute") + async + ".json");
    const Outcome r =
        run_on_ranks(2, {"bench", "all_reduce", "-b", "64", "-e", "4K", "-f", "8", "-n", "3", "-w",
                         "1", "--async", async, "--compute-us", "100", "--json", path});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_TRUE(contains(r.out, std::string(", 100 us of compute per call ") +
                                    (is_async ? "between issue and wait" : "before it") +
                                    " (left out of the times)\n"))
        << r.out;
    const auto rows = table_rows(r.out);
    ASSERT_EQ(rows.size(), 3u) << r.out;
    for (const auto& row : rows) EXPECT_EQ(row[8], "0") << r.out;
    const std::string json = read_file(path);
    EXPECT_TRUE(contains(json, "\"compute_us\":100")) << json;
  }
}

TEST(BenchCli, JsonIsWhatThePlannersCalibrationReads) {
  ScratchDir dir;
  const std::string path = dir / "all_reduce.json";
  const Outcome r = run_on_ranks(
      2, {"bench", "all_reduce", "-b", "1K", "-e", "8K", "-n", "2", "-w", "1", "--json", path},
      {"TPF_ALLREDUCE_ALGO=two_shot", "TPF_SHM_BUFFER_BYTES=65536"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const plan::BenchFile file = plan::parse_bench_json(read_file(path), path);
  EXPECT_EQ(file.slot_bytes, 65536u);
  ASSERT_FALSE(file.measurements.empty()) << read_file(path);
  for (const plan::ShmMeasurement& m : file.measurements) {
    EXPECT_EQ(m.algorithm, coll::AllReduceAlgorithm::two_shot);
    EXPECT_EQ(m.nranks, 2);
    EXPECT_GT(m.measured_us, 0.0);
  }
}

TEST(BenchCli, JsonOfAnAutomaticChoiceIsRefusedByTheCalibrationNamingTheKey) {
  ScratchDir dir;
  const std::string path = dir / "auto.json";
  const Outcome r = run_on_ranks(
      2, {"bench", "all_reduce", "-b", "1K", "-e", "2K", "-n", "1", "-w", "0", "--json", path});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(read_file(path), "\"algorithm\":\"automatic\"")) << read_file(path);
  try {
    plan::parse_bench_json(read_file(path), path);
    ADD_FAILURE() << "an automatic run was taken for a forced one";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "'algorithm' is 'automatic'")) << e.what();
  }
}

TEST(BenchCli, BadInputIsAUsageErrorNamingIt) {
  const Outcome flag = run_tpf({"bench", "all_reduce", "-x"});
  EXPECT_EQ(flag.exit_code, 2);
  EXPECT_TRUE(contains(flag.err, "'-x'")) << flag.err;
  const Outcome name = run_tpf({"bench", "allreduse"});
  EXPECT_EQ(name.exit_code, 2);
  EXPECT_TRUE(contains(name.err, "allreduse")) << name.err;
  EXPECT_TRUE(contains(name.err, "send_recv|barrier")) << name.err;
  const Outcome async = run_tpf({"bench", "all_reduce", "--async", "yes"});
  EXPECT_EQ(async.exit_code, 2);
  EXPECT_TRUE(contains(async.err, "--async expects 0, 1, timed or poll, got 'yes'")) << async.err;
  const Outcome compute = run_tpf({"bench", "all_reduce", "--compute-us", "-5"});
  EXPECT_EQ(compute.exit_code, 2);
  EXPECT_TRUE(contains(compute.err, "--compute-us must be an integer in [0, ")) << compute.err;
  const Outcome no_form = run_tpf({"bench", "send_recv", "--placement", "ip"});
  EXPECT_EQ(no_form.exit_code, 2);
  EXPECT_TRUE(contains(no_form.err, "--placement ip: send_recv has no in-place form"))
      << no_form.err;
  const Outcome placement = run_tpf({"bench", "all_reduce", "--placement", "sideways"});
  EXPECT_EQ(placement.exit_code, 2);
  EXPECT_TRUE(contains(placement.err,
                       "--placement expects both, out-of-place (oop) or in-place (ip), got "
                       "'sideways'"))
      << placement.err;
  const Outcome alone = run_on_ranks(1, {"bench", "send_recv", "-n", "1", "-w", "0"});
  EXPECT_NE(alone.exit_code, 0);  // tpf run reports a failed rank as 1
  EXPECT_TRUE(contains(alone.err, "send_recv needs at least 2 ranks")) << alone.err;
}

TEST(DemoCli, VerifiesEveryResultOnEveryRank) {
  const Outcome r = run_on_ranks(2, {"demo"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const char* line : {"all_reduce sum", "all_gather", "reduce_scatter sum", "broadcast root 0",
                           "bf16", "rank 0: all results verified", "rank 1: all results verified",
                           "tpf demo: all results verified on every rank"}) {
    EXPECT_TRUE(contains(r.out, line)) << line << "\n" << r.out;
  }
}

}  // namespace
}  // namespace tpf::testing
