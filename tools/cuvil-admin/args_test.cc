#include "args.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cuvil::admin_cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

AdminArgs Parse(std::vector<std::string> args) {
  auto parsed = ParseArgs(args);
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  return parsed.ok() ? *parsed : AdminArgs();
}

std::string Error(std::vector<std::string> args) {
  auto parsed = ParseArgs(args);
  EXPECT_FALSE(parsed.ok());
  return parsed.ok() ? "" : std::string(parsed.status().message());
}

TEST(AdminArgsTest, GlobalFlagsBeforeOrAfterTheVerb) {
  AdminArgs a = Parse({"-u", "10.0.0.1:9001", "--token-file", "/t", "list", "--json"});
  EXPECT_EQ(a.verb, Verb::kList);
  EXPECT_EQ(a.url, "10.0.0.1:9001");
  EXPECT_EQ(a.token_file, "/t");
  EXPECT_TRUE(a.json);
  AdminArgs b = Parse({"list", "--url=h:1", "--timeout", "2.5"});
  EXPECT_EQ(b.url, "h:1");
  EXPECT_EQ(b.timeout_s, 2.5);
}

TEST(AdminArgsTest, Defaults) {
  AdminArgs a = Parse({"functions", "mlp"});
  EXPECT_EQ(a.url, "127.0.0.1:8001");
  EXPECT_FALSE(a.json);
  EXPECT_EQ(a.model, "mlp");
  EXPECT_EQ(a.version, 0);
}

TEST(AdminArgsTest, HelpAloneAndPerVerb) {
  EXPECT_THAT(Error({}), HasSubstr("no verb given"));
  AdminArgs general = Parse({"--help"});
  EXPECT_TRUE(general.help);
  EXPECT_EQ(general.verb, Verb::kNone);
  // A verb's --help wins over its missing arguments.
  AdminArgs patch = Parse({"patch", "-h"});
  EXPECT_TRUE(patch.help);
  EXPECT_EQ(patch.verb, Verb::kPatch);
  EXPECT_THAT(UsageText(Verb::kPatch), HasSubstr("--recompile OPTIONS"));
  EXPECT_THAT(UsageText(Verb::kNone), HasSubstr("rollback MODEL ID"));
  for (Verb v : {Verb::kLoad, Verb::kUnload, Verb::kList, Verb::kIndex, Verb::kFunctions,
                 Verb::kPatch, Verb::kRollback, Verb::kPatches, Verb::kSnapshot, Verb::kRestore}) {
    EXPECT_THAT(UsageText(v), HasSubstr(std::string("usage: cuvil-admin ") + VerbName(v)));
  }
}

TEST(AdminArgsTest, PatchKinds) {
  AdminArgs ir = Parse({"patch", "mlp", "-v", "2", "--ir", "p.ll", "--function", "k1",
                        "--function=k2", "--author", "me", "--force", "--rtol", "0.01"});
  EXPECT_EQ(ir.kind, "ir");
  EXPECT_EQ(ir.ir_file, "p.ll");
  EXPECT_EQ(ir.version, 2);
  EXPECT_THAT(ir.functions, ElementsAre("k1", "k2"));
  EXPECT_EQ(ir.author, "me");
  EXPECT_TRUE(ir.force);
  EXPECT_TRUE(ir.validate);
  EXPECT_EQ(ir.rtol, 0.01);
  AdminArgs re = Parse({"patch", "mlp", "--recompile", "opt=1,unroll=4", "--no-validate"});
  EXPECT_EQ(re.kind, "recompile");
  EXPECT_EQ(re.recompile_options, "opt=1,unroll=4");
  EXPECT_FALSE(re.validate);
  AdminArgs prof = Parse({"patch", "mlp", "--profile", "5"});
  EXPECT_EQ(prof.kind, "profile");
  EXPECT_EQ(*prof.profile_seconds, 5);
  EXPECT_TRUE(prof.wait);
  EXPECT_FALSE(Parse({"patch", "mlp", "--profile", "0.5", "--no-wait"}).wait);
  EXPECT_THAT(Error({"patch", "mlp", "--ir", "f", "--no-wait"}), HasSubstr("--profile only"));
}

TEST(AdminArgsTest, PatchNeedsExactlyOneKind) {
  EXPECT_THAT(Error({"patch", "mlp"}), HasSubstr("exactly one of --ir"));
  EXPECT_THAT(Error({"patch", "mlp", "--ir", "a", "--profile", "3"}), HasSubstr("exactly one"));
  EXPECT_THAT(Error({"patch", "mlp", "--profile", "0"}), HasSubstr("positive"));
  EXPECT_THAT(Error({"patch", "mlp", "--profile", "abc"}), HasSubstr("bad value 'abc'"));
}

TEST(AdminArgsTest, Positionals) {
  AdminArgs r = Parse({"rollback", "mlp", "7", "-v", "1"});
  EXPECT_EQ(r.model, "mlp");
  EXPECT_EQ(r.patch_id, "7");
  EXPECT_EQ(r.version, 1);
  EXPECT_EQ(Parse({"restore", "snap.bin"}).in_file, "snap.bin");
  EXPECT_EQ(Parse({"snapshot", "mlp", "--out", "s.bin"}).out_file, "s.bin");
  EXPECT_THAT(Error({"rollback", "mlp"}), HasSubstr("'rollback' takes MODEL PATCH_ID, got 1"));
  EXPECT_THAT(Error({"list", "extra"}), HasSubstr("takes no arguments"));
  EXPECT_THAT(Error({"unload"}), HasSubstr("takes MODEL, got 0 arguments"));
  EXPECT_THAT(Error({"snapshot", "mlp"}), HasSubstr("--out FILE"));
}

TEST(AdminArgsTest, LoadFlags) {
  AdminArgs a =
      Parse({"load", "m", "--onnx", "m.onnx", "-v", "3", "--config", "c.pbtxt", "--no-wait"});
  EXPECT_EQ(a.onnx_file, "m.onnx");
  EXPECT_EQ(a.version, 3);
  EXPECT_EQ(a.config_file, "c.pbtxt");
  EXPECT_FALSE(a.wait);
  EXPECT_THAT(Error({"load", "m", "-v", "3"}), HasSubstr("inline --onnx"));
}

TEST(AdminArgsTest, BadUsage) {
  EXPECT_THAT(Error({"frobnicate"}), HasSubstr("unknown verb 'frobnicate'"));
  EXPECT_THAT(Error({"list", "--bogus"}), HasSubstr("unknown flag '--bogus'"));
  EXPECT_THAT(Error({"list", "--ir", "x"}), HasSubstr("--ir does not apply to 'list'"));
  EXPECT_THAT(Error({"list", "-u"}), HasSubstr("-u"));
  EXPECT_THAT(Error({"list", "-u", "nohostport"}), HasSubstr("HOST:PORT"));
  EXPECT_THAT(Error({"list", "--json=1"}), HasSubstr("takes no value"));
  EXPECT_THAT(Error({"functions", "mlp", "-v", "-1"}), HasSubstr("bad value '-1' for --version"));
  EXPECT_THAT(Error({"functions", "mlp", "-v", "x"}), HasSubstr("--version"));
  EXPECT_THAT(Error({"list", "--timeout", "0"}), HasSubstr("positive"));
  EXPECT_THAT(Error({"--json"}), HasSubstr("no verb"));
}

TEST(AdminArgsTest, DoubleDashEndsFlags) {
  EXPECT_THAT(Error({"unload", "--", "-weird"}), HasSubstr("bad model name"));
  EXPECT_EQ(Parse({"restore", "--", "-file"}).in_file, "-file");
}

TEST(AdminArgsTest, Sequences) {
  AdminArgs all = Parse({"sequences", "list"});
  EXPECT_EQ(all.verb, Verb::kSequences);
  EXPECT_EQ(all.sequence_action, "list");
  EXPECT_EQ(all.model, "");
  AdminArgs one = Parse({"sequences", "list", "vad", "-v", "2"});
  EXPECT_EQ(one.model, "vad");
  EXPECT_EQ(one.version, 2);
  AdminArgs end = Parse({"sequences", "end", "vad", "42"});
  EXPECT_EQ(end.sequence_action, "end");
  EXPECT_EQ(end.model, "vad");
  EXPECT_EQ(end.sequence_id, "42");
  EXPECT_FALSE(end.string_id);
  EXPECT_TRUE(Parse({"sequences", "end", "vad", "42", "--string-id"}).string_id);
  EXPECT_THAT(Error({"sequences"}), HasSubstr("'list [MODEL]' or 'end MODEL ID'"));
  EXPECT_THAT(Error({"sequences", "drop", "vad"}), HasSubstr("'end MODEL ID'"));
  EXPECT_THAT(Error({"sequences", "end", "vad"}), HasSubstr("'end MODEL ID'"));
  EXPECT_THAT(Error({"sequences", "list", "a", "b"}), HasSubstr("'list [MODEL]'"));
  EXPECT_THAT(Error({"sequences", "end", "vad", "0"}), HasSubstr("non-zero"));
  EXPECT_THAT(Error({"sequences", "list", "-v", "1"}), HasSubstr("with a MODEL"));
  EXPECT_THAT(Error({"sequences", "list", "--string-id"}), HasSubstr("--string-id"));
  EXPECT_THAT(Error({"list", "--string-id"}), HasSubstr("does not apply to 'list'"));
}

}  // namespace
}  // namespace cuvil::admin_cli
