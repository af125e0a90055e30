/* server/serve_cmd.h: `spill serve`, the command around the HTTP server
 * (registered in cli/spill_main.c). Returns the exit code: 0 after a clean
 * shutdown (SIGINT/SIGTERM), 1 on failure, 2 on a usage error. */
#ifndef SPILL_SERVER_SERVE_CMD_H
#define SPILL_SERVER_SERVE_CMD_H

#ifdef __cplusplus
extern "C" {
#endif

int spill_serve_cmd(int argc, char **argv);
/* Its usage text ("usage: spill serve ..."), for the CLI's command table. */
extern const char spill_serve_cmd_usage[];

#ifdef __cplusplus
}
#endif
#endif
