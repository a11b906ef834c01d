// EXPECT_TPF_ERROR(statement, code, "part", ...): a gtest check that statement throws tpf::Error
// with the given code and a message containing every part (for the test process itself; child
// bodies of multi-rank tests use expect_error.h).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tpf/error.h"

// Runs statement, which must throw tpf::Error(code) whose message contains each part.
#define EXPECT_TPF_ERROR(statement, expected_code, ...)                                        \
  EXPECT_THROW(                                                                                \
      {                                                                                        \
        try {                                                                                  \
          statement;                                                                           \
        } catch (const ::tpf::Error& e) {                                                      \
          EXPECT_EQ(e.code(), expected_code) << e.what();                                      \
          /* std::string copies: the parts may be temporaries that end before the loop runs */ \
          const std::vector<std::string> parts({__VA_ARGS__});                                 \
          for (const std::string& part : parts) {                                              \
            EXPECT_NE(std::string_view(e.what()).find(part), std::string_view::npos)           \
                << "'" << part << "' is not in: " << e.what();                                 \
          }                                                                                    \
          throw;                                                                               \
        }                                                                                      \
      },                                                                                       \
      ::tpf::Error)
