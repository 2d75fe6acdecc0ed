// What NVRTC may read for CUDA C++ from outside (runtime/compile/source_rules.hpp): no
// option that reads or writes files, no include that names a file by absolute path, by a
// '..' component or by a macro, no NUL byte, no header named twice. Each refusal names the
// option or the file and line; directives in comments and string literals are not
// directives.
#include <string>
#include <utility>
#include <vector>

#include "runtime/compile/source_rules.hpp"
#include "test_support.hpp"

namespace jitcache {
namespace {

using Headers = std::vector<std::pair<std::string, std::string>>;

Status check(const std::string& text, const Headers& headers = {}, const std::vector<std::string>& options = {}) {
  return check_cuda_input(text, headers, options, "k.cu");
}

void expect_refused(const Status& s, const std::vector<std::string>& parts) {
  ASSERT_FALSE(s) << "accepted";
  EXPECT_EQ(s.error().code, ErrorCode::invalid_argument);
  for (const auto& part : parts) EXPECT_NE(s.error().message.find(part), std::string::npos) << s.error().message;
}

TEST(SourceRules, OptionsThatReadOrWriteFilesAreRefusedNamingTheOption) {
  for (const char* o : {"-I", "-I/tmp", "-Iinclude", "--include-path", "--include-path=/tmp", "-include",
                        "--pre-include", "--pre-include=val.h", "--preinclude=val.h", "-isystem", "--pch",
                        "--create-pch=x.pch", "--use-pch=x.pch", "--pch-dir=/tmp", "--time=t.csv",
                        "--fdevice-time-trace=t.json", "--jobserver"}) {
    SCOPED_TRACE(o);
    expect_refused(check("int x;\n", {}, {o}), {std::string("'") + o + "'", "--include-header"});
  }
  for (const char* o : {"--std=c++17", "--fmad=false", "-DX=1", "--define-macro=Y", "--use_fast_math",
                        "--dopt=on", "-lineinfo", "--ptxas-options=-v"})
    EXPECT_TRUE(check("int x;\n", {}, {o})) << o;
}

TEST(SourceRules, IncludesByAbsolutePathDotDotOrMacroAreRefusedNamingFileAndLine) {
  expect_refused(check("int a;\n#include \"/tmp/val.h\"\n"), {"k.cu:2", "/tmp/val.h", "absolute"});
  expect_refused(check("#  include </etc/val.h>\n"), {"k.cu:1", "absolute"});
  expect_refused(check("#include \"../val.h\"\n"), {"k.cu:1", "'..'"});
  expect_refused(check("#include \"a/../../val.h\"\n"), {"'..'"});
  expect_refused(check("#define H \"/tmp/val.h\"\n#include H\n"), {"k.cu:2", "macro"});
  expect_refused(check("#include_next \"/x.h\"\n"), {"#include_next"});
  expect_refused(check("#embed \"/x.bin\"\n"), {"#embed"});
  expect_refused(check("#if __has_include(\"/tmp/val.h\")\n#endif\n"), {"__has_include", "absolute"});
  expect_refused(check("#if __has_include_next(<../v.h>)\n#endif\n"), {"__has_include_next"});
  expect_refused(check("#if __has_include(NAME)\n#endif\n"), {"macro"});
  // Joined lines count: the directive continues onto the next line.
  expect_refused(check("int a;\n#include \\\n \"/tmp/val.h\"\n"), {"k.cu:2"});
  expect_refused(check("#inc\\\nlude \"/v.h\"\n"), {"absolute"});
  // In a named header: the header is named.
  expect_refused(check("#include \"a.h\"\n", {{"a.h", "\n\n#include \"/abs/b.h\"\n"}}), {"header a.h:3"});
}

TEST(SourceRules, DirectivesInCommentsAndStringsAreNotDirectives) {
  EXPECT_TRUE(check("// #include \"/tmp/val.h\"\nint a;\n"));
  EXPECT_TRUE(check("/* \n#include \"/tmp/val.h\"\n */ int a;\n"));
  EXPECT_TRUE(check("const char* s = \"#include \\\"/tmp/val.h\\\"\";\n"));
  EXPECT_TRUE(check("const char* s = R\"x(\n#include \"/tmp/val.h\"\n)x\";\n"));
  EXPECT_TRUE(check("int a; // __has_include(\"/x\")\n"));
  EXPECT_TRUE(check("#include \"defs.h\"\n#include <cuda_fp16.h>\n#include \"sub/x.h\"\n"));
  EXPECT_TRUE(check("#define FILE_NAME \"..\"\nint x; # include_me\n"));
  EXPECT_TRUE(check("#include \"a..b.h\"\n"));
}

TEST(SourceRules, NulBytesAreRefusedNamingFileAndOffset) {
  expect_refused(check(std::string("int a;\0int b;\n", 14)), {"k.cu", "offset 6", "NUL"});
  expect_refused(check("#include \"a.h\"\n", {{"a.h", std::string("x\0y", 3)}}), {"header a.h", "offset 1"});
}

TEST(SourceRules, AHeaderNamedTwiceIsRefusedNamingIt) {
  expect_refused(check("int a;\n", {{"a.h", "int x;"}, {"b.h", ""}, {"a.h", "int y;"}}), {"'a.h'", "twice"});
  EXPECT_TRUE(check("int a;\n", {{"a.h", "int x;"}, {"b.h", ""}}));
}

}  // namespace
}  // namespace jitcache
