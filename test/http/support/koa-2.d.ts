// Koa 2 is installed under the npm alias `koa-2`, beside Koa 3; both are typed by @types/koa.
declare module 'koa-2' {
  import Koa from 'koa';
  export default Koa;
}
