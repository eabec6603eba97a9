// A Nest application for test/http/nestjs.test.ts, compiled there by `tsc` with decorator metadata
// (which Nest's injection needs and vitest's transformer does not emit). Excluded from the
// project's typecheck for the same reason.
import 'reflect-metadata';
import { Controller, Get, Module, type INestApplication } from '@nestjs/common';
import { APP_GUARD, NestFactory } from '@nestjs/core';
import { SkipThrottle, Throttle, ThrottlerGuard, ThrottlerModule, type ThrottlerOptions, type ThrottlerStorage } from '@nestjs/throttler';

@Controller()
class AppController {
  @Get('ok')
  ok(): string {
    return 'ok';
  }

  // A route's own limit for the default throttler: its key is the route's, its rule its own.
  @Throttle({ default: { limit: 1, ttl: 60_000 } })
  @Get('strict')
  strict(): string {
    return 'strict';
  }

  @SkipThrottle()
  @Get('free')
  free(): string {
    return 'free';
  }
}

/** Starts the app on a loopback port with `storage` deciding every throttler. */
export async function startApp(storage: ThrottlerStorage, throttlers: ThrottlerOptions[]): Promise<{ url: string; app: INestApplication }> {
  @Module({
    imports: [ThrottlerModule.forRoot({ throttlers, storage })],
    controllers: [AppController],
    providers: [{ provide: APP_GUARD, useClass: ThrottlerGuard }],
  })
  class AppModule {}
  const app = await NestFactory.create(AppModule, { logger: false });
  await app.listen(0, '127.0.0.1');
  return { url: await app.getUrl(), app };
}
